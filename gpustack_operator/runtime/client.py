"""Kubernetes API access: one client per process, plain-dict objects, typed errors.

kr8s provides configuration and authentication only (kubeconfig / ``--context`` /
``KUBECONFIG`` / ``~/.kube/config`` / in-cluster service account, exec plugins, credential
re-reads) and answers the first ``/version``. Requests and watches then go over the
keep-alive transport of ``runtime.http11`` with kr8s's TLS context and token (kr8s's httpx
session, through ``Api.call_api``, where the kubeconfig names a proxy). Everything above is ours,
because kr8s's object layer does not fit a controller runtime: ``api.get()`` drops the list's
``resourceVersion``, ``api.watch()`` loops on a stale resourceVersion after 410 and ends
silently, and Box objects cost memory at thousands of Nodes.

What this module adds over raw HTTP:

- typed errors (:class:`NotFound`, :class:`Conflict`, :class:`Gone`, ...) carrying the message
  of the server's ``Status`` body; transport failures become :class:`ApiUnavailable`;
- explicit timeouts on every request (kr8s's session has none by default); a watch has no read
  timeout on the socket but an inactivity timeout of its own (:class:`WatchStalled`);
- ``rest_client_requests_total`` / ``rest_client_request_duration_seconds`` metrics;
- an optional client-side QPS/burst limiter, as client-go has;
- no retries, except one after re-reading credentials on 401: callers (the informer, the
  work queue) own retry policy, so a failure is never retried twice over.
  ``TooManyRequests.retry_after`` carries the server's ``Retry-After``. (kr8s's ``call_api``
  never retries 429/5xx either; its own 401/403 handling is bypassed, see ``Client._call``.)
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import math
import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlencode, urlsplit

import anyio
import httpx
import kr8s
import kr8s.asyncio
import structlog

from .. import __version__
from .backoff import TokenBucket
from .http11 import Http11Transport, RawResponse, StreamedResponse, TransportError
from .jsondecode import decode_object
from .kr8sinternals import close_session, rebuild_session
from .metrics import REST_CLIENT_LATENCY, REST_CLIENT_REQUESTS
from .resources import Resource

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ApiUnavailable",
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "ListResult",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "WatchEvent",
    "WatchInterrupted",
    "WatchStalled",
    "WatchStream",
    "error_from_status",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
_APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
_JSON_CONTENT_TYPE = "application/json"
DEFAULT_TIMEOUT = 30.0
DEFAULT_WATCH_INACTIVITY_TIMEOUT = 70.0
_USER_AGENT = f"gpustack-operator/{__version__}"
WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


# --- errors ---------------------------------------------------------------------------------


class ApiError(Exception):
    """A request the API server refused or could not answer.

    ``str(error)`` is the server's ``Status.message`` (what kubectl would print).
    ``status`` is the HTTP code (0 when no response came back), ``reason`` the Status reason
    (``NotFound``, ``AlreadyExists``, ``Expired``...), ``retry_after`` the seconds the server
    asked us to wait (``Retry-After`` header or ``details.retryAfterSeconds``), if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        retry_after: float | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.details: Mapping[str, Any] = details or {}

    def __str__(self) -> str:
        return self.message


class BadRequest(ApiError):
    """HTTP 400: the request is malformed (e.g. a bad selector); retrying will not help."""


class Unauthorized(ApiError):
    """HTTP 401: credentials missing or expired (kr8s already re-read them and retried)."""


class Forbidden(ApiError):
    """HTTP 403: RBAC denies the verb; fix the ClusterRole rather than retrying."""


class NotFound(ApiError):
    """HTTP 404: the object (or the kind itself) does not exist."""


class Conflict(ApiError):
    """HTTP 409: a stale resourceVersion or a precondition failed; re-read and retry."""


class AlreadyExists(Conflict):
    """HTTP 409 with reason AlreadyExists: a create hit an existing name."""


class Gone(ApiError):
    """HTTP 410 (or an in-stream ERROR with code 410): the resourceVersion is too old."""


class Invalid(ApiError):
    """HTTP 422: the object fails validation; ``details.causes`` names the fields."""


class TooManyRequests(ApiError):
    """HTTP 429: the server sheds load; wait ``retry_after`` seconds (when given)."""


class ServerError(ApiError):
    """HTTP 5xx: the server failed; retry with backoff."""


class ApiUnavailable(ApiError):
    """No usable answer: connection refused/reset, request timeout, broken stream."""


class WatchInterrupted(ApiUnavailable):
    """A watch stream broke mid-way (connection reset, truncated body)."""


class WatchStalled(ApiUnavailable):
    """A watch stream sent nothing for longer than its inactivity timeout."""


_ERRORS_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (HTTP dates are not used by the API server)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def error_from_status(
    code: int,
    status: Mapping[str, Any] | None,
    *,
    fallback_message: str = "",
    retry_after_header: str | None = None,
) -> ApiError:
    """Build the typed error for an HTTP *code* and the server's ``Status`` body, if any.

    Used for HTTP error responses and for in-stream watch ERROR events alike, so both map to
    the same exception types.
    """
    body: Mapping[str, Any] = status if isinstance(status, Mapping) else {}
    details = body.get("details")
    details = details if isinstance(details, Mapping) else {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or fallback_message or f"HTTP {code} {reason}".strip())
    retry_after = _parse_retry_after(retry_after_header)
    if retry_after is None and isinstance(details.get("retryAfterSeconds"), int | float):
        retry_after = float(details["retryAfterSeconds"])
    cls: type[ApiError]
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif code >= 500:
        cls = ServerError
    else:
        cls = _ERRORS_BY_CODE.get(code, ApiError)
    return cls(message, status=code, reason=reason, retry_after=retry_after, details=details)


class _Answer(Protocol):
    """A complete HTTP answer: an ``httpx.Response`` whose body was read, or the keep-alive
    transport's :class:`~.http11.RawResponse`."""

    @property
    def status_code(self) -> int: ...
    @property
    def reason_phrase(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content(self) -> bytes: ...


def _error_from_response(response: _Answer) -> ApiError:
    """Typed error for an HTTP error *response* whose body has been read."""
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    text = response.content.decode("utf-8", "replace").strip()[:500]
    return error_from_status(
        response.status_code,
        body if isinstance(body, dict) else None,
        fallback_message=text or f"HTTP {response.status_code} {response.reason_phrase}",
        retry_after_header=response.headers.get("retry-after"),
    )


# --- results --------------------------------------------------------------------------------


@dataclass
class ListResult:
    """One LIST answer: the items and the collection's resourceVersion to watch from."""

    items: list[JSON]
    resource_version: str
    continue_token: str | None = None


@dataclass
class WatchEvent:
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: JSON = field(repr=False)

    @property
    def resource_version(self) -> str:
        """The object's resourceVersion: where a re-watch resumes after this event."""
        return str(self.object.get("metadata", {}).get("resourceVersion") or "")


class WatchStream:
    """Async iterator of :class:`WatchEvent` over one streaming watch response.

    Raises :class:`Gone` for an in-stream ERROR with code 410, another :class:`ApiError` for
    other ERROR events, :class:`WatchInterrupted` when the connection breaks and
    :class:`WatchStalled` when nothing (not even a bookmark) arrives within the inactivity
    timeout. A clean end of the response (the server's ``timeoutSeconds``) ends iteration.
    """

    def __init__(
        self,
        lines: AsyncIterator[str] | AsyncIterator[bytes],
        inactivity_timeout: float | None,
    ) -> None:
        self._lines = lines
        self._inactivity_timeout = inactivity_timeout
        self.events = 0

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            line = await self._next_line()
            if line.strip():
                event = self._decode(line)
                self.events += 1
                return event

    async def _next_line(self) -> str | bytes:
        try:
            if self._inactivity_timeout is None:
                return await self._lines.__anext__()
            with anyio.fail_after(self._inactivity_timeout):
                return await self._lines.__anext__()
        except TimeoutError as exc:
            raise WatchStalled(
                f"watch sent nothing for {self._inactivity_timeout:g}s; restarting it",
                reason="WatchStalled",
            ) from exc
        except (httpx.TransportError, httpx.StreamError, TransportError) as exc:
            raise WatchInterrupted(
                f"watch stream broke: {exc!r}", reason="WatchInterrupted"
            ) from exc

    @staticmethod
    def _decode(line: str | bytes) -> WatchEvent:
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise ApiError(
                f"undecodable watch event: {line[:200]!r}", reason="InvalidWatchEvent"
            ) from exc
        kind = raw.get("type") if isinstance(raw, dict) else None
        obj = raw.get("object") if isinstance(raw, dict) else None
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            raise error_from_status(
                code if isinstance(code, int) else 500,
                obj if isinstance(obj, dict) else None,
                fallback_message="watch ERROR event without a Status",
            )
        if kind not in WATCH_EVENT_TYPES or not isinstance(obj, dict):
            raise ApiError(f"malformed watch event: {line[:200]!r}", reason="InvalidWatchEvent")
        return WatchEvent(str(kind), obj)

    async def aclose(self) -> None:
        """Finalise the line reader now rather than at garbage collection."""
        aclose = getattr(self._lines, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception as exc:  # the stream already broke; closing it fails the same way
                log.debug("watch_stream_close_failed", error=repr(exc))


# --- the client -----------------------------------------------------------------------------


class Client:
    """The process's one API client: REST verbs on plain dicts, over a kr8s ``Api``.

    Build it with :meth:`connect`. Every method raises :class:`ApiError` subclasses and
    retries nothing (but one re-read of credentials on 401). Objects returned are the decoded
    JSON (``dict``), never kr8s objects.
    """

    def __init__(
        self,
        api: kr8s.asyncio.Api,
        *,
        qps: float | None = None,
        burst: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        watch_inactivity_timeout: float | None = DEFAULT_WATCH_INACTIVITY_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        rate_limiter: TokenBucket | None = None,
        http11: bool = True,
    ) -> None:
        self._api = api
        self._timeout = timeout
        self.watch_inactivity_timeout = watch_inactivity_timeout
        self._clock = clock
        self._limiter = rate_limiter
        if self._limiter is None and qps is not None:
            # client-go's defaults pair burst with qps (5/10, 50/100): burst = 2 x qps.
            self._limiter = TokenBucket(qps, burst if burst is not None else max(1, int(qps * 2)))
        server = str(getattr(api.auth, "server", "") or "")
        self.host = urlsplit(server).netloc or server
        self._log = log.bind(host=self.host)
        self._auth_lock = anyio.Lock()
        self._auth_generation = 0
        self._http11 = http11
        self._transport: Http11Transport | None = None

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        *,
        qps: float | None = None,
        burst: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - per-request timeout, kept by the client
        watch_inactivity_timeout: float | None = DEFAULT_WATCH_INACTIVITY_TIMEOUT,
        http11: bool = True,
    ) -> Client:
        """Load credentials and check the server answers ``/version``.

        Credentials come from *kubeconfig* (a path, or ``a:b`` paths), else ``KUBECONFIG``,
        else ``~/.kube/config``, else the in-cluster service account; *context* picks a
        kubeconfig context. *http11* False sends every request through kr8s's httpx session
        (one-shot requests otherwise use ``runtime.http11``). The kr8s ``Api`` is built
        directly rather than through ``kr8s.asyncio.api()``, whose per-thread cache hands any
        existing instance to a caller that passes no arguments (one test's cluster leaking
        into the next).
        """
        api = kr8s.asyncio.Api(
            bypass_factory=True,
            kubeconfig=str(kubeconfig) if kubeconfig is not None else None,
            context=context,
        )
        api.timeout = httpx.Timeout(timeout)
        try:
            await api
        except ValueError as exc:  # kr8s: no credentials found, unknown context, bad config
            raise ValueError(
                f"cannot load Kubernetes credentials: {exc}. Pass --kubeconfig/--context, set "
                "KUBECONFIG, or run in a Pod with a service account."
            ) from exc
        except kr8s.ServerError as exc:
            response = exc.response
            if isinstance(response, httpx.Response):
                raise _error_from_response(response) from exc
            raise ApiUnavailable(f"cannot reach the API server: {exc}") from exc
        except kr8s.APITimeoutError as exc:
            raise ApiUnavailable(
                f"the API server did not answer within {timeout:g}s", reason="Timeout"
            ) from exc
        except httpx.TransportError as exc:
            raise ApiUnavailable(
                f"cannot reach the API server at {api.auth.server}: {exc!r}"
            ) from exc
        return cls(
            api,
            qps=qps,
            burst=burst,
            timeout=timeout,
            watch_inactivity_timeout=watch_inactivity_timeout,
            http11=http11,
        )

    @property
    def kr8s_api(self) -> kr8s.asyncio.Api:
        """The underlying kr8s ``Api`` (for kr8s helpers such as port-forward; not for CRUD)."""
        return self._api

    async def close(self) -> None:
        """Close the HTTP connections for new requests. Open watches keep their connection
        until their task ends (cancel the informers first), so closing at shutdown starts no
        retry of every watch."""
        if self._transport is not None:
            await self._transport.aclose()
        await close_session(self._api)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- plumbing ---------------------------------------------------------------------------

    def _record(self, method: str, code: str, started: float) -> None:
        REST_CLIENT_REQUESTS.labels(code=code, method=method, host=self.host).inc()
        REST_CLIENT_LATENCY.labels(verb=method, host=self.host).observe(
            max(0.0, self._clock() - started)
        )

    @contextlib.asynccontextmanager
    async def _call(
        self,
        method: str,
        *,
        base: str,
        version: str,
        url: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = _JSON_CONTENT_TYPE,
        stream: bool = False,
    ) -> AsyncIterator[_Answer]:
        """One HTTP exchange, with limiter, metrics and typed errors: over the keep-alive
        transport (:meth:`_call_http11`) when there is one, else through kr8s.

        The URL is ``base/version/url`` (kr8s's ``call_api`` layout). A streamed response has
        no read timeout: the watch enforces its own inactivity timeout instead.

        kr8s is asked not to raise on HTTP errors: its own handling re-reads credentials and
        *recreates the shared HTTP session* on every 401 and 403, which would cut every open
        watch whenever RBAC denies one request. We map errors ourselves and re-read
        credentials once, on 401 only.
        """
        if self._limiter is not None:
            await self._limiter.acquire()
        transport = await self._lean_transport()
        if transport is not None:
            async with self._call_http11(
                transport, method, base, version, url, params, body, content_type, stream
            ) as answer:
                yield answer
            return
        kwargs: dict[str, Any] = {
            "timeout": httpx.Timeout(self._timeout, read=None)
            if stream
            else httpx.Timeout(self._timeout)
        }
        if params:
            kwargs["params"] = dict(params)
        if body is not None:
            kwargs["content"] = json.dumps(body, separators=(",", ":")).encode()
            kwargs["headers"] = {"Content-Type": content_type}
        where = f"{method} {base}/{version}/{url}".replace("//", "/")
        started = self._clock()
        code = "<error>"
        yielded = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                for attempt in (1, 2):
                    exchange = contextlib.AsyncExitStack()
                    # The stream has no read timeout, so bound the wait for its headers here.
                    with anyio.fail_after(self._timeout if stream else None):
                        response = await exchange.enter_async_context(
                            self._api.call_api(
                                method,
                                version=version,
                                base=base,
                                url=url,
                                stream=stream,
                                raise_for_status=False,
                                **kwargs,
                            )
                        )
                    code = str(response.status_code)
                    if response.status_code == 401 and attempt == 1:
                        await exchange.aclose()
                        self._record(method, code, started)
                        await self._reauthenticate()
                        started = self._clock()
                        continue
                    stack.push_async_exit(exchange)
                    break
                if response.is_error:
                    if stream:
                        await response.aread()
                    raise _error_from_response(response)
                self._record(method, code, started)
                code = ""
                yielded = True
                yield response
        except (kr8s.APITimeoutError, TimeoutError) as exc:
            if yielded:  # raised by the caller's block, not by this request
                raise
            raise ApiUnavailable(
                f"{where}: no answer within {self._timeout:g}s", reason="Timeout"
            ) from exc
        except httpx.TransportError as exc:
            if yielded:
                raise
            raise ApiUnavailable(f"{where}: {exc!r}", reason="ConnectionFailed") from exc
        finally:
            if code:
                self._record(method, code, started)

    async def _lean_transport(self) -> Http11Transport | None:
        """The keep-alive transport for one-shot requests (``runtime.http11``), built on first
        use from kr8s's view of the kubeconfig; None where httpx stays in charge (a proxy,
        or the client was built with ``http11=False``)."""
        if self._transport is not None or not self._http11:
            return self._transport
        auth = self._api.auth
        if getattr(auth, "proxy", None):
            self._http11 = False
            return None
        server = str(getattr(auth, "server", "") or "")
        context: ssl.SSLContext | None = None
        if server.startswith("https:"):
            verify: object = await auth.ssl_context()  # type: ignore[no-untyped-call]
            # kr8s answers True where the kubeconfig names no CA or certificate: httpx's
            # default verification then, the same as through kr8s's session.
            context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context()
        try:
            self._transport = Http11Transport(
                server, ssl_context=context, server_hostname=auth.tls_server_name or None
            )
        except ValueError as exc:
            self._log.info("http11_transport_unavailable", error=str(exc))
            self._http11 = False
        return self._transport

    @contextlib.asynccontextmanager
    async def _call_http11(
        self,
        transport: Http11Transport,
        method: str,
        base: str,
        version: str,
        url: str,
        params: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        stream: bool,
    ) -> AsyncIterator[_Answer]:
        """:meth:`_call` over the keep-alive transport: the same limiter, metrics, typed
        errors and one credential re-read on 401. A stream (a watch) has its own connection
        and no read timeout once its headers are in."""
        # kr8s's ``call_api`` layout: the base, the version where there is one, the path.
        target = "/".join([base, version, url] if version else [base, url])
        if params:
            target = f"{target}?{urlencode(params, quote_via=quote)}"
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        where = f"{method} {base}/{version}/{url}".replace("//", "/")
        started = self._clock()
        code = "<error>"
        async with contextlib.AsyncExitStack() as stack:
            try:
                for attempt in (1, 2):
                    headers = self._headers(content_type if payload is not None else None)
                    exchange = contextlib.AsyncExitStack()
                    answer: RawResponse | StreamedResponse
                    try:
                        with anyio.fail_after(self._timeout):
                            if stream:
                                answer = await exchange.enter_async_context(
                                    transport.stream(method, target, headers)
                                )
                            else:
                                answer = await transport.request(method, target, headers, payload)
                    except TimeoutError as exc:
                        raise ApiUnavailable(
                            f"{where}: no answer within {self._timeout:g}s", reason="Timeout"
                        ) from exc
                    except TransportError as exc:
                        raise ApiUnavailable(f"{where}: {exc}", reason="ConnectionFailed") from exc
                    code = str(answer.status_code)
                    if answer.status_code == 401 and attempt == 1:
                        await exchange.aclose()
                        self._record(method, code, started)
                        await self._reauthenticate()
                        transport = await self._lean_transport() or transport
                        started = self._clock()
                        continue
                    stack.push_async_exit(exchange)
                    break
                if answer.status_code >= 400:
                    if isinstance(answer, StreamedResponse):
                        # The Status body names the problem; without it the code still does.
                        with contextlib.suppress(TransportError, TimeoutError):
                            with anyio.fail_after(self._timeout):
                                await answer.aread()
                    raise _error_from_response(answer)
                self._record(method, code, started)
                code = ""
            finally:
                if code:
                    self._record(method, code, started)
            yield answer

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"User-Agent": _USER_AGENT, "Accept": _JSON_CONTENT_TYPE}
        token = getattr(self._api.auth, "token", None)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    async def _reauthenticate(self) -> None:
        """Re-read credentials (rotated token, exec plugin) and rebuild the HTTP session.

        The token is baked into the session's headers, so the session is rebuilt
        (``runtime.kr8sinternals``). Concurrent 401s re-read once.
        """
        generation = self._auth_generation
        async with self._auth_lock:
            if generation != self._auth_generation:
                return
            self._log.info("api_unauthorized_reauthenticating")
            await self._api.auth.reauthenticate()
            await rebuild_session(self._api)
            if self._transport is not None:  # client certificates may have rotated too
                await self._transport.aclose()
                self._transport = None
            self._auth_generation += 1

    async def _json(
        self,
        method: str,
        res: Resource,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = _JSON_CONTENT_TYPE,
    ) -> JSON:
        """A non-streaming request on *res*, returning the decoded JSON object."""
        async with self._call(
            method,
            base="/apis" if res.group else "/api",
            version=res.api_version,
            url=res.relative_path(namespace, name, subresource),
            params=params,
            body=body,
            content_type=content_type,
        ) as response:
            return await _decode_large_object(response)

    # --- verbs ------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        """GET one object; raises :class:`NotFound` when it does not exist."""
        return _with_type(res, await self._json("GET", res, namespace=namespace, name=name))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult:
        """One LIST page, keeping the collection's resourceVersion (a watch starts there).

        Items get ``apiVersion``/``kind`` filled in (the API omits them inside lists).
        """
        params = _selector_params(label_selector, field_selector)
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        elif resource_version is not None:
            params["resourceVersion"] = resource_version
        data = await self._json("GET", res, namespace=namespace, params=params)
        raw_items = data.get("items") or []
        items = [_with_type(res, item) for item in raw_items if isinstance(item, dict)]
        meta = data.get("metadata") or {}
        return ListResult(
            items=items,
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_token=str(meta["continue"]) if meta.get("continue") else None,
        )

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int | None = 500,
    ) -> ListResult:
        """LIST every page (``limit``/``continue``), returning the first page's resourceVersion.

        All pages of one paged LIST are a single snapshot, so the first page's resourceVersion
        is the whole list's. When the snapshot expires between pages (410 on a continue
        token, under heavy churn), the list is taken again in one unpaged request, as
        client-go's pager does.
        """
        list_selected = functools.partial(
            self.list, res, namespace, label_selector=label_selector, field_selector=field_selector
        )
        page = await list_selected(limit=page_size, resource_version=resource_version)
        items = page.items
        rv = page.resource_version
        try:
            while page.continue_token:
                page = await list_selected(limit=page_size, continue_token=page.continue_token)
                items.extend(page.items)
        except Gone as exc:
            self._log.info(
                "list_continue_expired_listing_unpaged", resource=str(res), error=str(exc)
            )
            full = await list_selected()
            return ListResult(items=full.items, resource_version=full.resource_version)
        return ListResult(items=items, resource_version=rv, continue_token=None)

    @contextlib.asynccontextmanager
    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        inactivity_timeout: float | Literal["default"] | None = "default",
    ) -> AsyncIterator[WatchStream]:
        """Open a watch from *resource_version*; iterate the yielded :class:`WatchStream`.

        Opening raises typed errors (:class:`Gone` on 410). *timeout_seconds* asks the server
        to end the stream cleanly (a random value in [300, 600) when None, as client-go does,
        so many watchers do not reconnect together). *inactivity_timeout* defaults to the
        client's ``watch_inactivity_timeout``; ``None`` disables it.
        """
        params: dict[str, str] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(
                timeout_seconds if timeout_seconds is not None else random.randrange(300, 600)
            ),
        }
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        params.update(_selector_params(label_selector, field_selector))
        inactivity = (
            self.watch_inactivity_timeout if inactivity_timeout == "default" else inactivity_timeout
        )
        async with self._call(
            "GET",
            base="/apis" if res.group else "/api",
            version=res.api_version,
            url=res.relative_path(namespace),
            params=params,
            stream=True,
        ) as response:
            lines: AsyncIterator[str] | AsyncIterator[bytes]
            if isinstance(response, StreamedResponse):
                lines = response.lines()
            elif isinstance(response, httpx.Response):
                lines = response.aiter_lines()
            else:
                raise TypeError(f"a watch needs a streamed response, not {response!r}")
            stream = WatchStream(lines, inactivity)
            try:
                yield stream
            finally:
                await stream.aclose()

    async def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        """POST a new object; raises :class:`AlreadyExists` when the name is taken."""
        ns = namespace or _namespace_of(res, body)
        return await self._json("POST", res, namespace=ns, body=_typed_body(res, body))

    async def replace(self, res: Resource, body: JSON, *, subresource: str | None = None) -> JSON:
        """PUT the whole object (optimistic concurrency on ``metadata.resourceVersion``)."""
        return await self._json(
            "PUT",
            res,
            namespace=_namespace_of(res, body),
            name=_name_of(body),
            subresource=subresource,
            body=_typed_body(res, body),
        )

    async def apply(
        self,
        res: Resource,
        body: JSON,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
    ) -> JSON:
        """Server-side apply *body* as *field_manager* (create-or-update of the fields we own).

        ``force`` takes over fields another manager owns; use it only for fields that are
        ours by design. Apply ``/status`` with ``subresource="status"``.
        """
        params = {"fieldManager": field_manager}
        if force:
            params["force"] = "true"
        return await self._json(
            "PATCH",
            res,
            namespace=_namespace_of(res, body),
            name=_name_of(body),
            subresource=subresource,
            params=params,
            body=_typed_body(res, body),
            content_type=_APPLY_CONTENT_TYPE,
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: JSON | builtins.list[Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> JSON:
        """PATCH with a JSON merge patch (dict), JSON patch (list) or strategic merge patch."""
        if patch_type not in _PATCH_CONTENT_TYPES:
            raise ValueError(f"unknown patch type {patch_type!r}: use merge, json or strategic")
        params = {"fieldManager": field_manager} if field_manager else None
        return await self._json(
            "PATCH",
            res,
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=params,
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Mapping[str, str] | None = None,
        propagation_policy: str | None = None,
    ) -> JSON:
        """DELETE an object; raises :class:`NotFound` when it is already gone.

        *preconditions* (``{"uid": ..., "resourceVersion": ...}``) make the delete fail with
        :class:`Conflict` if the object was replaced or changed meanwhile.
        *propagation_policy* is ``Foreground``, ``Background`` or ``Orphan``. Returns what the
        server answered: the object (still there while finalizers run) or a ``Status``.
        """
        options: JSON = {}
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options} if options else None
        return await self._json("DELETE", res, namespace=namespace, name=name, body=body)

    async def served_versions(self, group: str) -> builtins.list[str]:
        """The versions the server serves for API *group*, preferred first; [] if unserved.

        Lets callers pick among versions of a CRD group (e.g. Kueue) at start-up.
        """
        if not group:
            async with self._call("GET", base="/api", version="", url="") as response:
                return [str(v) for v in _decode_object(response).get("versions") or []]
        try:
            async with self._call("GET", base="/apis", version="", url=group) as response:
                data = _decode_object(response)
        except NotFound:
            return []
        versions = [
            str(v["version"])
            for v in data.get("versions") or []
            if isinstance(v, dict) and v.get("version")
        ]
        preferred = (data.get("preferredVersion") or {}).get("version")
        if preferred in versions:
            versions.remove(preferred)
            versions.insert(0, preferred)
        return versions


# --- helpers --------------------------------------------------------------------------------


def _selector_params(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    """The query parameters for the selectors that are set (LIST and WATCH share them)."""
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


async def _decode_large_object(response: _Answer) -> JSON:
    """:func:`_decode_object`, yielding to the event loop while a large body (a big LIST)
    decodes (``runtime.jsondecode``)."""
    try:
        data = await decode_object(response.content)
    except ValueError as exc:
        raise ApiError(
            f"the API server answered {response.status_code} with a body that is not JSON",
            status=response.status_code,
            reason="InvalidResponse",
        ) from exc
    return _ensure_object(response, data)


def _decode_object(response: _Answer) -> JSON:
    """Decode a JSON object body; anything else is a protocol error, not a crash."""
    try:
        data = json.loads(response.content)
    except ValueError as exc:
        raise ApiError(
            f"the API server answered {response.status_code} with a body that is not JSON",
            status=response.status_code,
            reason="InvalidResponse",
        ) from exc
    return _ensure_object(response, data)


def _ensure_object(response: _Answer, data: Any) -> JSON:
    if not isinstance(data, dict):
        raise ApiError(
            f"the API server answered {response.status_code} with JSON that is not an object",
            status=response.status_code,
            reason="InvalidResponse",
        )
    return data


def _with_type(res: Resource, obj: JSON) -> JSON:
    """Fill ``apiVersion``/``kind`` where the API leaves them out (list items)."""
    if "apiVersion" not in obj:
        obj["apiVersion"] = res.api_version
    if "kind" not in obj:
        obj["kind"] = res.kind
    return obj


def _typed_body(res: Resource, body: JSON) -> JSON:
    """A copy of *body* with ``apiVersion``/``kind`` set, as writes (and apply) require."""
    return {"apiVersion": res.api_version, "kind": res.kind, **body}


def _name_of(body: JSON) -> str:
    name = (body.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("the object has no metadata.name: set it before writing")
    return str(name)


def _namespace_of(res: Resource, body: JSON) -> str | None:
    if not res.namespaced:
        return None
    namespace = (body.get("metadata") or {}).get("namespace")
    if not namespace:
        raise ValueError(f"{res.kind} is namespaced: set metadata.namespace or pass namespace")
    return str(namespace)
