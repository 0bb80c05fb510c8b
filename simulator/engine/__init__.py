"""Replay engine: runs a Trace on a cluster with SimPy."""

from .replay import EngineConfig, OpRecord, Timeline, replay

__all__ = ["EngineConfig", "OpRecord", "Timeline", "replay"]
