"""pobo: private outsourced Bayesian optimization between a data curator and a modeler.

The installed package holds the design card's four layers as subpackages --
`pobo.protocol` (messages, encoding, policy, ledger, transcripts), `pobo.transport`
(ZeroMQ), `pobo.parties` (the curator's and the modeler's logic) and `pobo.scenarios`
(datasets, the command line, launching, sweeps, reports). In the repository they are
the top-level folders `protocol/`, `transport/`, `parties/` and `scenarios/`, mapped
under `pobo.` by setuptools' package-dir. Importing `pobo` imports none of them.
"""
from __future__ import annotations

import os as _os

__version__ = "0.2.0"

# Run from a source checkout (this folder beside pyproject.toml and the layer folders),
# the layers are found beside it, as the installed (package-dir) layout has them inside.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "pyproject.toml")) and _os.path.isfile(
        _os.path.join(_checkout, "protocol", "messages.py")):
    __path__.append(_checkout)  # noqa: F821  (the package's own __path__)
