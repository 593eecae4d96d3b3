"""A transcript is continued only as it was written: a resumed writer refuses a file whose
hash chain is broken (an edited or damaged record) or whose tail is torn, and a write that
fails (a full disk) leaves no torn record behind for a resume to trip on."""
import errno

import pytest

from pobo.protocol.codec import encode
from pobo.protocol.messages import PROTOCOL_VERSION, Hello, Query
from pobo.protocol.transcript import Transcript, TranscriptError, raw_records, read_transcript


def _written(path, n: int = 6) -> list[bytes]:
    """A transcript of `n` records at `path`; the raw bytes of each."""
    t = Transcript(path)
    t.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    for seq in range(1, n):
        t.append("recv", "query", encode(Query(seq, seq)))
    t.close()
    return [raw for raw, _ in raw_records(path.read_bytes())]


def test_a_whole_transcript_is_continued(tmp_path):
    path = tmp_path / "t.transcript"
    _written(path)
    again = Transcript(path, resume=True)
    again.append("recv", "query", encode(Query(9, 9)))
    again.close()
    assert [r.seq for r in read_transcript(path)] == list(range(7))


@pytest.mark.parametrize("damage", ["flip", "drop_middle", "swap", "torn"])
def test_a_damaged_transcript_is_not_continued(tmp_path, damage):
    path = tmp_path / "t.transcript"
    raws = _written(path)
    if damage == "flip":  # one bit inside an earlier record's frame
        data = bytearray(path.read_bytes())
        data[sum(map(len, raws[:3])) + len(raws[3]) - 5] ^= 1
        path.write_bytes(bytes(data))
    elif damage == "drop_middle":
        path.write_bytes(b"".join(raws[:2] + raws[3:]))
    elif damage == "swap":
        path.write_bytes(b"".join(raws[:2] + [raws[3], raws[2]] + raws[4:]))
    else:  # torn: a record cut short (what a crash mid-write on a full disk leaves)
        path.write_bytes(b"".join(raws)[:-7])
    before = path.read_bytes()
    with pytest.raises(TranscriptError, match="hash chain broken|sequence number|truncated record|corrupt"):
        Transcript(path, resume=True)
    assert path.read_bytes() == before  # refused, not repaired or appended to


class _FullDisk:
    """A file whose next write stores `room` bytes and then fails with ENOSPC."""

    def __init__(self, file, room: int) -> None:
        self._file, self.room = file, room

    def write(self, data) -> int:
        if self.room is None:
            return self._file.write(data)
        written = self._file.write(bytes(data)[:self.room])
        self.room = None
        if written < len(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return written

    def __getattr__(self, name):
        return getattr(self._file, name)


def test_a_failed_write_leaves_no_torn_record(tmp_path):
    path = tmp_path / "t.transcript"
    t = Transcript(path)
    t.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    size = path.stat().st_size
    t._file = _FullDisk(t._file, room=10)  # the disk fills in the middle of the next record
    with pytest.raises(OSError) as failed:
        t.append("recv", "query", encode(Query(1, 1)))
    assert failed.value.errno == errno.ENOSPC
    assert path.stat().st_size == size  # the part written is gone again
    t.append("recv", "query", encode(Query(1, 1)))  # room again: the chain goes on
    t.close()
    again = Transcript(path, resume=True)  # and a resume continues it
    again.close()
    assert [r.seq for r in read_transcript(path)] == [0, 1]
