"""The wire's ids as IntEnums (channel/layout.py) against the names and numbers the channel carries:
a member moved, added or renamed without its name table (or the probe's aliases) fails here."""

from tuimon.channel import layout as L
from tuimon.model import vocab
from tuimon.probe import anatomy, core


def test_phases_are_the_phase_members_in_id_order():
    assert L.PHASES == ("other", "data", "forward", "backward", "optimizer", "sync", "comm", "copy")
    assert [(p.value, p.name.lower()) for p in L.Phase] == list(enumerate(L.PHASES))
    assert anatomy.PHASES is L.PHASES
    assert (anatomy.OTHER, anatomy.DATA, anatomy.FORWARD, anatomy.BACKWARD, anatomy.OPTIMIZER, anatomy.SYNC,
            anatomy.COMM, anatomy.COPY) == tuple(range(8))
    assert type(anatomy.SYNC) is int  # (phases_py.py takes exact ints: anatomy.py says why)


def test_step_sources_are_the_step_source_members_in_id_order():
    assert L.STEP_SOURCES == ("none", "dataloader", "forward", "backward", "optimizer", "tuimon.step")
    assert [s.value for s in L.StepSource] == list(range(len(L.STEP_SOURCES)))
    names = {s: L.STEP_SOURCES[s] for s in L.StepSource}
    assert names[L.StepSource.EXPLICIT] == "tuimon.step"
    assert all(names[s] == s.name.lower() for s in L.StepSource if s is not L.StepSource.EXPLICIT)
    assert (core.NO_SOURCE, core.DATALOADER, core.FORWARD_CALL, core.BACKWARD_CALL, core.OPTIMIZER_STEP,
            core.EXPLICIT) == tuple(L.StepSource)
    assert type(core.EXPLICIT) is int  # (plain ints on the hot path: core.py says why)
    assert L.STEP_SOURCES[1:] == vocab.STEP_SOURCES  # the monitor's vocabulary: all but "none"


def test_control_block_ids_keep_their_numbers():
    assert [(m.name, m.value) for m in L.CaptureMode] == [("NONE", 0), ("STEPS", 1), ("SECONDS", 2)]
    assert [(m.name, m.value) for m in L.CaptureState] == [
        ("IDLE", 0), ("ARMED", 1), ("CAPTURING", 2), ("WRITING", 3), ("DONE", 4), ("FAILED", 5)]
    assert [(m.name, m.value) for m in L.EndKind] == [("NONE", 0), ("EXCEPTION", 1), ("CLEAN", 2)]
    assert (L.CAPTURE_NONE, L.CAPTURE_STEPS, L.CAPTURE_SECONDS) == tuple(L.CaptureMode)
    assert (L.STATE_IDLE, L.STATE_FAILED) == (L.CaptureState.IDLE, L.CaptureState.FAILED)
    assert (L.END_NONE, L.END_EXCEPTION, L.END_CLEAN) == tuple(L.EndKind)


def test_the_enums_pack_and_unpack_as_their_ints():
    raw = L.CTL_END.pack(7, L.EndKind.CLEAN, 0)
    assert L.CTL_END.unpack(raw) == (7, 2, 0)
    assert f"{L.CaptureState.FAILED:d}" == "5" and float(L.StepSource.EXPLICIT) == 5.0
