"""Errors a monitor can meet when it opens or reads a segment; each says what to do."""

from __future__ import annotations


class ChannelError(Exception):
    """A segment cannot be used. The message is written for the person at the terminal."""


class NoSegment(ChannelError):
    """The process has no tuimon channel."""


class ForeignSegment(ChannelError):
    """The segment belongs to another user."""


class IncompatibleSegment(ChannelError):
    """The segment was written with another layout version."""


class CorruptSegment(ChannelError):
    """The segment's bytes do not make a valid layout."""


class StaleSegment(ChannelError):
    """The segment's process is gone and its PID now belongs to another process."""
