"""A fault-injecting proxy in front of the real kube-apiserver: the faults a real server will not produce on demand.

It forwards every request (watches streamed as they come) to the API server with the admin client certificate, and
serves plain HTTP on 127.0.0.1 to the client under test. On demand it answers chosen requests with an error status
(500, 503, 429 …) instead of forwarding them, or stops listening (connections refused, open watches cut) and starts
again on the same port: the API server itself never changes.
"""
from __future__ import annotations

import asyncio
import re
import ssl
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from kubernetes import client

T = TypeVar("T")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


@dataclass
class Fault:
    method: str
    path: re.Pattern
    status: int
    times: int | None  # None: until cleared
    after: int = 0  # let this many matching requests through first


@dataclass
class FaultProxy:
    """`upstream`: the admin client's configuration (host, CA, client certificate) of the real API server."""

    upstream: client.Configuration
    port: int = 0  # 0: any free port, kept across stop()/start()
    faults: list[Fault] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop, init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __enter__(self) -> FaultProxy:
        threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True).start()
        self._run(self._open_session())
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._run(self._session.close())
        self._loop.call_soon_threadsafe(self._loop.stop)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api_client(self) -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=self.url))

    def kubeconfig(self) -> dict:
        return {"apiVersion": "v1", "kind": "Config", "current-context": "proxy",
                "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
                "users": [{"name": "proxy", "user": {}}],
                "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}]}

    # -- faults --------------------------------------------------------------------------------------------
    def fail(self, method: str, path_regex: str, status: int, times: int | None = None, after: int = 0) -> None:
        """Answer `status` to the next `times` requests (all, when None) of `method` on a path matching, once
        `after` of them have gone through."""
        with self._lock:
            self.faults.append(Fault(method, re.compile(path_regex), status, times, after))

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.method == method and fault.path.search(path):
                    if fault.after > 0:
                        fault.after -= 1
                        continue
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self.faults.remove(fault)
                    return fault
        return None

    # -- listening -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Listen (again, on the same port)."""
        self._run(self._listen())

    def stop(self) -> None:
        """Stop listening: new connections are refused and the open ones (watches) are cut."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            self._run(runner.cleanup())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _open_session(self) -> None:
        context = ssl.create_default_context(cafile=self.upstream.ssl_ca_cert)
        context.load_cert_chain(self.upstream.cert_file, self.upstream.key_file)
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context),
                                              timeout=aiohttp.ClientTimeout(total=None))

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = runner.addresses[0][1]
        self._runner = runner

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        fault = self._take_fault(request.method, request.path)
        if fault is not None:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": fault.status,
                    "message": f"injected by the fault proxy: {fault.status}"}
            return web.json_response(body, status=fault.status, headers={"Retry-After": "1"})
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._session.request(request.method, self.upstream.host + request.path_qs, headers=headers,
                                         data=await request.read(), allow_redirects=False,
                                         skip_auto_headers={"Content-Type"}) as upstream:  # as the client sent it
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():  # a watch's events as they come
                await response.write(chunk)
            await response.write_eof()
            return response
