"""The inductor's logs follow the one switch every stage reads (``KILN_LOGS`` / ``set_logs``)."""

from __future__ import annotations

import kiln


def test_set_logs_at_run_time_turns_on_the_inductor_schedule(capfd):
    kiln.dynamo.set_logs("inductor")
    try:
        out = kiln.compile(lambda x: x.sin() * 3 + 1)(kiln.arange(8.0))
    finally:
        kiln.dynamo.set_logs("")
    assert "[kiln.inductor] schedule:" in capfd.readouterr().err
    expected = kiln.arange(8.0).sin() * 3 + 1
    assert kiln.allclose(out, expected)


def test_inductor_is_quiet_when_logs_are_off(capfd):
    kiln.dynamo.set_logs("")
    kiln.compile(lambda x: x.cos() * 5 - 2)(kiln.arange(8.0))
    assert "[kiln.inductor]" not in capfd.readouterr().err
