"""Start a real ``hyperplace serve`` process on a free loopback port and stop it again (used
by the service tests and ``bench/bench_service.py``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on (http://\S+) ")


class LocalServer:
    """``with LocalServer(workers=2) as server: httpx.get(server.url + "/healthz")``.

    ``args`` are extra ``hyperplace serve`` options; ``test_hooks`` enables ``/v1/debug/*``.
    """

    def __init__(self, *args: str, db: str | Path = ":memory:", workers: int = 2,
                 test_hooks: bool = False, start_timeout_s: float = 60.0):
        self.args = ["--port", "0", "--workers", str(workers), "--db", str(db), *args]
        self.test_hooks = test_hooks
        self.start_timeout_s = start_timeout_s
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self.returncode: int | None = None

    def start(self) -> "LocalServer":
        env = dict(os.environ)
        if self.test_hooks:
            env["HYPERPLACE_SERVICE_TEST_HOOKS"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hyperplace.cli", "serve", *self.args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env)
        try:
            assert self.proc.stderr is not None
            end = time.monotonic() + self.start_timeout_s
            for line in self.proc.stderr:
                self.log.append(line)
                match = _LISTENING.search(line)
                if match:
                    self.url = match.group(1)
                    break
            if not self.url:
                self.proc.wait(timeout=10)
                raise RuntimeError("server did not start:\n" + "".join(self.log))
            threading.Thread(target=self._drain, daemon=True).start()
            self._wait_ready(end)
        except BaseException:  # never leave a half-started server running
            self.stop(timeout_s=10)
            raise
        return self

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def _wait_ready(self, end: float) -> None:
        import httpx

        headers = {}
        token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/readyz", headers=headers, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server not ready in time:\n" + "".join(self.log))

    def token(self) -> str | None:
        if "--token-file" in self.args:
            return Path(self.args[self.args.index("--token-file") + 1]).read_text().strip()
        return None

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful: in-flight requests finish), then wait."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self) -> int:
        """SIGKILL, as a crash or an OOM kill would end the server (no drain, no cleanup)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.returncode = self.proc.returncode
        return self.returncode

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
