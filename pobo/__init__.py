"""pobo: private outsourced Bayesian optimization between a data curator and a modeler.

Five rooms, one job each: `pobo.protocol` (messages, encoding, policy, ledger,
transcripts), `pobo.transport` (ZeroMQ), `pobo.parties` (the curator's and the
modeler's logic), `pobo.scenarios` (the problems: datasets, objectives, presets) and
this package's own modules, the application (the command line, launching, serving,
sessions, sweeps, reports). Imports flow application -> scenarios, parties, transport
-> protocol, never back. The layers are the repository's top-level folders;
`pobo/protocol` and its siblings are symbolic links to them, so editors, type checkers
and an editable install all see one ordinary package tree. Importing `pobo` imports
none of them.
"""
from __future__ import annotations

__version__ = "0.2.0"
