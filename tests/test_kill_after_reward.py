"""kill -9 of a curator process right after the modeler received a reward never loses
that answer from the journal, at either durability (at normal each answer commits at
once, at full answers share a COMMIT: either way before the reward leaves). Ports are
free loopback ones, waits bounded, the process killed in a finally."""
from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys

import pytest

from pobo.parties.journal import Journal
from pobo.protocol.cookie import cookie_round
from pobo.protocol.messages import PROTOCOL_VERSION, Hello, Query, Reward, new_nonce
from pobo.protocol.policy import MODELER
from pobo.remote import LISTENING
from pobo.session import open_channel
from pobo.transport.sockets import DealerPipe, close_context, new_context
from tests.curator_process import ROOT, free_port


@pytest.mark.parametrize("durability", ["normal", "full"])
@pytest.mark.parametrize("ldp", [["--ldp-eps", "2"], []], ids=["ldp", "no-ldp"])
def test_kill_9_right_after_a_reward_keeps_its_answer_in_the_journal(tmp_path, durability,
                                                                     ldp):
    """With LDP every answer is a SQLite transaction with its charge; without, at normal,
    a record in the session's answer log (which a reader merges, and a resume folds)."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    journal = tmp_path / "journal.db"
    curator = subprocess.Popen(
        [sys.executable, "-m", "pobo", "curator", "synthetic", "--grid", "8", "--T", "20",
         *ldp, "--bind", endpoint, "--journal", str(journal), "--durability",
         durability, "--timeout", "10", "--accept-timeout", "30", "--out", str(tmp_path / "c")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    received: list[Reward] = []

    async def modeler() -> None:
        ctx = new_context()
        channel = open_channel(DealerPipe.connect(ctx, endpoint), MODELER, False, None, 10)
        try:
            await channel.send(await cookie_round(channel, Hello(PROTOCOL_VERSION, "kill-test",
                                                                 nonce=new_nonce())))
            await channel.recv()  # Welcome
            await channel.recv()  # Dataset
            for seq in range(1, 6):
                await channel.send(Query(seq, seq * 7))
                received.append(await channel.recv())
            curator.kill()  # SIGKILL the moment the 5th reward is in
        finally:
            channel.close()
            close_context(ctx)

    try:
        assert curator.stdout.readline().startswith(LISTENING)
        asyncio.run(asyncio.wait_for(modeler(), 60))
        curator.wait(15)
    finally:
        if curator.poll() is None:
            curator.kill()
        curator.wait(15)
    assert [r.seq for r in received] == [1, 2, 3, 4, 5]
    with sqlite3.connect(journal) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tabled = dict(db.execute("SELECT seq, value FROM answers"))
    reader = Journal(journal)
    try:
        ((sid, _),) = reader.sessions()
        kept = {seq: value for seq, _, _, value in reader.load(sid).answers}
    finally:
        reader.close()
    assert {r.seq: r.value for r in received} == kept
    assert tabled == ({} if durability == "normal" and not ldp else kept)  # the log's, else
