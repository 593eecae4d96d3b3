"""Scenario wiring: datasets and objectives, run configuration, process launch, CLI."""
