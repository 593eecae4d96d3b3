"""The five rooms and the import rule: the application (pobo/) -> scenarios, parties,
transport -> protocol, never back; a party never opens a socket."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {  # what each layer's modules may import from pobo
    "protocol": {"protocol"},
    "transport": {"protocol", "transport"},
    "parties": {"protocol", "parties"},
    "scenarios": {"protocol", "parties", "scenarios"},
}


def pobo_imports(path: Path) -> set[str]:
    """The pobo subpackages or application modules a module imports (any depth)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "pobo" and len(parts) > 1:
                found.add(parts[1])
            elif name == "pobo" and isinstance(node, ast.ImportFrom):
                found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_nothing_above_it(layer):
    for path in sorted((ROOT / layer).glob("*.py")):
        upward = pobo_imports(path) - ALLOWED[layer] - {"__version__"}
        assert not upward, f"{layer}/{path.name} imports {sorted(upward)}"


def test_the_layers_are_the_packages_the_application_sees():
    for layer in ALLOWED:
        link = ROOT / "pobo" / layer
        assert link.is_symlink() and link.resolve() == (ROOT / layer).resolve()
    import pobo.protocol.messages

    assert Path(pobo.protocol.messages.__file__).parent.name == "protocol"


def test_no_party_opens_a_socket():
    for path in sorted((ROOT / "parties").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "import zmq" not in text and "socket(" not in text, path.name
