"""A push is not silent: the engine's per-layer push events, summed into a plain line at most every
PUSH_REPORT_SECONDS and once at the end (pure logic on the events the Docker API streams)."""

from __future__ import annotations

from imagebuild.engines.pushprogress import PUSH_REPORT_SECONDS, PushProgress


def test_events_are_summed_and_throttled():
    now = [0.0]
    lines: list[str] = []
    seen = PushProgress("h:5000/ns/x:1", lines.append, clock=lambda: now[0])
    events = [{"id": "a", "status": "Preparing"}, {"id": "b", "status": "Preparing"},
              {"id": "a", "status": "Pushing", "progressDetail": {"current": 400_000_000, "total": 1_000_000_000}},
              {"id": "a", "status": "Pushing", "progressDetail": {"current": 600_000_000, "total": 1_000_000_000}},
              {"id": "b", "status": "Layer already exists"},
              {"id": "a", "status": "Pushing", "progressDetail": {"current": 2_000_000_000, "total": 1_000_000_000}},
              {"id": "a", "status": "Pushed"}, {"status": "1: digest: sha256:" + "a" * 64},
              {"id": "c", "status": "Pushing", "progressDetail": "not a mapping"}]
    for i, event in enumerate(events):
        now[0] = i * (PUSH_REPORT_SECONDS / 2)
        seen.event(event)
    seen.done()
    # one line every other event (the throttle), the last one complete; a current beyond its
    # total never reads as more than the total
    assert lines[0] == "pushing h:5000/ns/x:1: 400 of 1000 MB, 0 of 2 layers done"
    assert lines[-1] == "pushing h:5000/ns/x:1: 1000 of 1000 MB, 2 of 2 layers done"
    assert len(lines) == 1 + len(events) // 2


def test_no_progress_asked_is_silent():
    seen = PushProgress("x:1", None)
    seen.event({"id": "a", "status": "Pushed"})
    seen.done()
