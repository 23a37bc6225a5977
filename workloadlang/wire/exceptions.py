"""The wire client's exceptions. Every failure of a connection or an exchange is one of these
(never an `OSError`, never another library's type):

    WireError
     ├── ConnectError        no connection: the name did not resolve, every address refused
     ├── WriteError          the request could not be written
     ├── ReadError           reading the response failed (a reset, a broken pipe)
     ├── ProtocolError       the response is no HTTP/1.1 answer, or its body was cut short
     │    └── ConnectionDropped   the server closed before any byte of the answer: the request
     │                            was not processed, sending it again is safe
     └── WireTimeout         a deadline passed
          ├── ConnectTimeout
          ├── WriteTimeout
          └── ReadTimeout    nothing came for the read timeout

`ConnectionDropped` is what a keep-alive connection closed by the server just as it was reused
gives (llama-server closes one after a stream); the chat client sends such a request once more.
"""

from __future__ import annotations


class WireError(Exception):
    """Base of every wire client error; `str()` is one line."""


class ConnectError(WireError):
    pass


class WriteError(WireError):
    pass


class ReadError(WireError):
    pass


class ProtocolError(WireError):
    pass


class ConnectionDropped(ProtocolError):
    pass


class WireTimeout(WireError):
    pass


class ConnectTimeout(WireTimeout):
    pass


class WriteTimeout(WireTimeout):
    pass


class ReadTimeout(WireTimeout):
    pass
