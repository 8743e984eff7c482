"""The vocabularies: every name a concept can take, in one place. Each is a Literal (the values are
plain strings, so JSON, recordings and Prometheus labels keep them as they are) with a tuple of its
members in order. A mapping from a member to something (a colour, a label, words) is keyed by the
Literal, so mypy checks its keys, and tests/test_vocab.py checks that it covers every member.

A field is typed with a vocabulary where tuimon's own code makes its value (Verdict.code,
Comparison.state); one that holds a name read from a channel or a recording (a phase, a capture
state, a step source) stays `str`: those bytes are untrusted, and a name outside the vocabulary is
shown as it is, never refused."""

from __future__ import annotations

from typing import Literal, get_args

# The verdict's class (analysis/verdicts/), in the order the rules try them.
VerdictCode = Literal["exited", "stalled", "waiting", "memory-growth", "straggler", "memory-pressure", "input-bound",
                      "copy-bound", "comm-bound", "memory-bound", "compute-bound", "healthy", "cpu-bound", "data-parallel",
                      "sync-bound", "host-bound", "mixed"]
VERDICT_CODES: tuple[VerdictCode, ...] = get_args(VerdictCode)

# The diagnosis' rules, in the order they are tried (analysis/verdicts/: VERDICTS; a class may have two rules).
RuleCode = Literal["exited", "stalled", "waiting", "memory-growth", "outside", "straggler", "memory-pressure", "input-high",
                   "copy-bound", "comm-bound", "memory-bound", "compute-bound", "healthy", "cpu-bound", "data-parallel",
                   "input-moderate", "sync-bound", "host-bound"]
RULE_CODES: tuple[RuleCode, ...] = get_args(RuleCode)

Confidence = Literal["high", "medium", "low"]
CONFIDENCES: tuple[Confidence, ...] = get_args(Confidence)

# The phases of a step on the loop thread (probe/anatomy.py), in the order a step's are shown and laid
# end to end. The channel numbers them its own way (channel/layout.py PHASES: the wire's ids).
Phase = Literal["data", "copy", "forward", "backward", "comm", "optimizer", "sync", "other"]
PHASES: tuple[Phase, ...] = get_args(Phase)

# In a hot line's name, what separates a library's line from the job's own line that led there
# (channel/layout.py HOT_CONTEXT, the wire's).
HOT_CONTEXT = "\x1f"

# What counts the steps (probe/core.py), weakest first; the channel's STEP_SOURCES adds "none" (code 0).
StepSource = Literal["dataloader", "forward", "backward", "optimizer", "tuimon.step"]
STEP_SOURCES: tuple[StepSource, ...] = get_args(StepSource)

# The job's step time against its baseline (analysis/regression.py); collecting: no decision yet.
ComparisonState = Literal["regression", "faster", "same", "collecting"]
COMPARISON_STATES: tuple[ComparisonState, ...] = get_args(ComparisonState)

# A capture window's state, as the control block says it (channel/control.py STATE_NAMES).
CaptureState = Literal["idle", "armed", "capturing", "writing", "done", "failed"]
CAPTURE_STATES: tuple[CaptureState, ...] = get_args(CaptureState)
