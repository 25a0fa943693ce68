"""The one place where Ostinato exceptions and gRPC status codes are mapped, both ways.

The server sends the exception's class name in the trailing metadata (``ostinato-error``) and
the message as the status details; the client rebuilds the same exception class from that
field, never by matching message text. Unknown names fall back to the status code.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any
from urllib.parse import quote, unquote

import grpc

from ostinato import errors

ERROR_KEY = "ostinato-error"
#: Trailing metadata of an Insert stream whose shared-memory ring the server would not map
#: (the value is the reason); the writer then resends its rows inline.
SHM_REFUSED_KEY = "ostinato-shm-refused"

#: Exception class -> status code (first match in MRO order wins).
_TO_CODE: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (errors.RateLimiterTimeout, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.TableNotFoundError, grpc.StatusCode.NOT_FOUND),
    (errors.CancelledError, grpc.StatusCode.CANCELLED),
    (errors.UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (errors.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (TypeError, grpc.StatusCode.INVALID_ARGUMENT),
    (KeyError, grpc.StatusCode.NOT_FOUND),
    (NotImplementedError, grpc.StatusCode.UNIMPLEMENTED),
]

#: Names the client may rebuild (only Ostinato's own classes).
_BY_NAME: dict[str, type[errors.ReverbError]] = {
    c.__name__: c
    for c in (
        errors.RateLimiterTimeout,
        errors.DeadlineExceededError,
        errors.TableNotFoundError,
        errors.CancelledError,
        errors.UnavailableError,
        errors.FailedPreconditionError,
        errors.ResourceExhaustedError,
        errors.InvalidArgumentError,
    )
}

_FROM_CODE: dict[grpc.StatusCode, type[errors.ReverbError]] = {
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceededError,
    grpc.StatusCode.NOT_FOUND: errors.TableNotFoundError,
    grpc.StatusCode.CANCELLED: errors.CancelledError,
    grpc.StatusCode.UNAVAILABLE: errors.UnavailableError,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhaustedError,
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgumentError,
    grpc.StatusCode.UNAUTHENTICATED: errors.FailedPreconditionError,
    grpc.StatusCode.PERMISSION_DENIED: errors.FailedPreconditionError,
    grpc.StatusCode.UNIMPLEMENTED: errors.UnimplementedError,
}


def code_for(exc: BaseException) -> grpc.StatusCode:
    for cls, code in _TO_CODE:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status code, details and trailing metadata that end an RPC failing with ``exc``."""
    name = type(exc).__name__ if type(exc).__name__ in _BY_NAME else ""
    if isinstance(exc, errors.TableNotFoundError):
        meta: tuple[tuple[str, str], ...] = (
            (ERROR_KEY, name),
            ("ostinato-table", quote(exc.table, safe="")),
            ("ostinato-available", ",".join(quote(a, safe="") for a in exc.available)),
        )
    else:
        meta = ((ERROR_KEY, name),)
    return code_for(exc), str(exc) or type(exc).__name__, meta


async def abort_with(context: Any, exc: BaseException) -> None:
    """Ends the RPC (of a ``grpc.aio`` server) with the status for ``exc`` (raises
    ``grpc.aio.AbortError``, as ``context.abort`` does)."""
    code, details, meta = status_for(exc)
    context.set_trailing_metadata(meta)
    await context.abort(code, details)


def from_rpc_error(err: grpc.RpcError, address: str) -> errors.ReverbError:
    """Rebuilds the Ostinato exception that the server raised (or a transport error)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    meta = dict(err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else {}
    name = meta.get(ERROR_KEY, "")
    if name == "TableNotFoundError":
        avail = [unquote(a) for a in meta.get("ostinato-available", "").split(",") if a]
        return errors.TableNotFoundError(unquote(meta.get("ostinato-table", "?")), avail)
    cls = _BY_NAME.get(name)
    if cls is not None and cls is not errors.UnavailableError:
        return cls(details)
    if code == grpc.StatusCode.UNAVAILABLE or cls is errors.UnavailableError:
        return errors.UnavailableError(f"Server at {address} is unavailable: {details}", address)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.DeadlineExceededError(f"Call to {address} exceeded its deadline: {details}")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return errors.FailedPreconditionError(
            f"Server at {address} rejected the credentials: {details}"
        )
    fallback = _FROM_CODE.get(code)
    if fallback is not None and fallback is not errors.TableNotFoundError:
        return fallback(details)
    return errors.ReverbError(f"{code.name if hasattr(code, 'name') else code}: {details}")


def _shm_refused(reason: str) -> tuple[tuple[tuple[str, str], ...], str]:
    return ((SHM_REFUSED_KEY, quote(reason, safe=" /")),), f"shared-memory ring refused: {reason}"


async def abort_shm_refused(context: Any, reason: str) -> None:
    """Ends an Insert stream whose shared-memory ring cannot be used (raises)."""
    meta, details = _shm_refused(reason)
    context.set_trailing_metadata(meta)
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, details)


def shm_refusal(err: grpc.RpcError) -> str | None:
    """The server's reason for refusing a writer's shared-memory ring, if that ended the call."""
    meta = dict(err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else {}
    reason = meta.get(SHM_REFUSED_KEY)
    return None if reason is None else unquote(reason)


class TLSMismatchError(errors.UnavailableError):
    """The client and the server disagree about TLS (one speaks it, the other does not).

    An :class:`~ostinato.errors.UnavailableError`, raised at once: retrying cannot help.
    """


#: Seconds the client's probe of a server's TLS may take (only after a failed connection).
TLS_PROBE_SECONDS = 1.0


def tls_mismatch(err: grpc.RpcError, address: str, client_tls: bool) -> TLSMismatchError | None:
    """The TLS mismatch behind a failed connection, if that is what it is.

    gRPC reports a plaintext client of a TLS server only as "Socket closed" (the server drops
    the connection), which is also what a server that goes away looks like: the server is then
    probed with a TLS handshake (no certificate checks, nothing sent after it, at most
    :data:`TLS_PROBE_SECONDS`). A TLS client of a plaintext server sees the server's first
    bytes rejected as a wrong TLS record version.
    """
    if not hasattr(err, "code") or err.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    details = (err.details() if hasattr(err, "details") else str(err)) or ""
    if client_tls:
        if "WRONG_VERSION_NUMBER" in details:
            return TLSMismatchError(
                f"Server at {address} does not speak TLS (it answered the TLS handshake in "
                "plaintext), but this client was given root_certificates: drop them, or start "
                f"the server with tls=ServerTLS(...). gRPC: {details}",
                address,
            )
        return None
    if "Socket closed" in details and speaks_tls(address):
        return TLSMismatchError(
            f"Server at {address} expects TLS, but this client connects without it: pass "
            "root_certificates=<PEM of the CA that signed the server's certificate> (and "
            f"tls_server_name if the address is not in the certificate). gRPC: {details}",
            address,
        )
    return None


def speaks_tls(address: str, timeout: float = TLS_PROBE_SECONDS) -> bool:
    """Whether the server at ``host:port`` completes a TLS handshake (certificates unchecked:
    this only asks which protocol it speaks). False when it cannot be reached."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in host:
        return False  # a target gRPC resolves itself (dns:///..., unix:...): not probed
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            with ctx.wrap_socket(sock, server_hostname=host or None):
                return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False
