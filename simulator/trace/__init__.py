"""Trace: the contract between what a program does and how the machine runs it."""

from .schema import KINDS, Communicator, Op, RankClass, Trace

__all__ = ["KINDS", "Communicator", "Op", "RankClass", "Trace"]
