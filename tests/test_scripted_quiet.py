"""The loopback server (the tests' and `demo`'s model) says nothing when a client hangs up in the
middle of a reply, as a real server does; any other error in a handler is still printed."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import pytest

from ouroboros.model.scripted import QuietServer


def error_printed(error: Exception, capsys: pytest.CaptureFixture[str]) -> str:
    server = QuietServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    try:
        raise error
    except Exception:
        server.handle_error(None, ("127.0.0.1", 1))
    finally:
        server.server_close()
    return capsys.readouterr().err


def test_a_client_hanging_up_mid_reply_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert error_printed(BrokenPipeError(32, "Broken pipe"), capsys) == ""
    assert error_printed(ConnectionResetError(104, "reset"), capsys) == ""


def test_a_fault_in_a_handler_is_still_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert "ValueError: the handler's own bug" in error_printed(
        ValueError("the handler's own bug"), capsys
    )
