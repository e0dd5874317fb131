"""Throwaway PostgreSQL, Redis, Redis Cluster and moto (SQS) servers for the tests and benchmarks.

Every server listens on 127.0.0.1 only, on a free high port, keeps all of its files under one
base directory and is stopped by pid. Readiness is polled with a deadline, never a fixed sleep.

In-process use (e.g. from ``tests/conftest.py``)::

    server = PostgresServer(tmp_path_factory.mktemp("pg"))
    server.start()
    ...  # server.url, server.pid, server.restart(), server.stop(mode="immediate")
    server.stop()

Command line (used by the Makefile); ``start`` prints ``NAME=URL`` on stdout, nothing else, and
writes ``DIR/server.json``; ``stop`` reads it and stops that pid::

    python -m tests.servers postgres start --dir .tmp/pg
    python -m tests.servers postgres stop --dir .tmp/pg
    python -m tests.servers redis start --dir .tmp/redis [--appendonly everysec]
    python -m tests.servers sqs start --dir .tmp/sqs
    python -m tests.servers redis_cluster start --dir .tmp/rc    # 3 primaries + 3 replicas
    python -m tests.servers redis available    # exit 0 if redis-server is installed
    python -c 'from tests.servers import KINDS; print(*KINDS)'   # the Makefile's list

This module imports only the standard library (psycopg is used for the readiness probe when it is
installed, ``pg_isready`` otherwise), so it runs before the project is installed.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import errno
import http.client
import importlib.util
import json
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

__all__ = [
    "KINDS",
    "PG_USER",
    "MotoServer",
    "PostgresServer",
    "RedisClusterServer",
    "RedisServer",
    "Server",
    "ServerError",
    "find_free_port",
    "main",
]

#: The servers, by the name ``make test`` starts them under (PostgreSQL first: it always runs).
#: A backend's test server bears its protocol's name (tests/conftest.py), and ``redis_cluster``
#: serves the ``redis-cluster`` backend; its ``start`` prints ``BLAMEQUEUE_TEST_<KIND>_URL=…``.
KINDS = ("postgres", "redis", "redis_cluster", "sqs")

PG_USER = "blamequeue-pg"
"""System user that owns the PostgreSQL data directory when the tests run as root."""

PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin",)

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0

# Linux hands out ephemeral ports from 32768 up; picking below that keeps a server's port from
# being taken by some client's outgoing connection while the server is down for a restart().
_PORT_RANGE = (20000, 32000)

# A Unix socket path (sun_path) holds at most 107 bytes plus the terminating NUL.
_MAX_SOCKET_PATH = 107

PostgresStopMode = Literal["smart", "fast", "immediate"]
AppendOnly = Literal["no", "everysec", "always"]


class ServerError(RuntimeError):
    """A server did not start or stop; the message ends with the tail of its log."""


# --------------------------------------------------------------------------- process helpers


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that could be bound just now.

    Another process may still take it before the server binds it; a server that fails to bind
    it fails to start.
    """
    low, high = _PORT_RANGE
    for candidate in random.sample(range(low, high), 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an unreaped zombie has already exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state follows the parenthesised command name, which may itself contain ") ".
    state = stat_line.rpartition(")")[2].split()[0]
    return state not in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _poll(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Call ``check`` until it returns True or ``timeout`` seconds pass; return its last result."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_pid_gone(pid: int, timeout: float) -> bool:
    return _poll(lambda: not pid_alive(pid), timeout)


def kill_pid(pid: int, sig: int, *, expect: str | None = None) -> bool:
    """Send ``sig`` to ``pid``; False if it is gone (or, with ``expect``, runs something else).

    ``expect`` is a substring of the command line: a pid read from a stale file may have been
    reused by an unrelated process, which must not be signalled.
    """
    if not pid_alive(pid):
        return False
    if expect is not None:
        cmdline = _cmdline(pid)
        if cmdline and expect not in cmdline:
            return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def terminate_pid(
    pid: int, sig: int = signal.SIGTERM, *, timeout: float = STOP_TIMEOUT, expect: str | None = None
) -> None:
    """Send ``sig``, wait up to ``timeout`` for the process to go, then SIGKILL it."""
    if not kill_pid(pid, sig, expect=expect):
        return
    if wait_pid_gone(pid, timeout):
        return
    kill_pid(pid, signal.SIGKILL, expect=expect)
    if not wait_pid_gone(pid, 10.0):
        raise ServerError(f"process {pid} survived SIGKILL")


def _log(message: str) -> None:
    print(f"[tests.servers] {message}", file=sys.stderr, flush=True)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return f"--- last lines of {path} ---\n" + "\n".join(text.splitlines()[-lines:])


def _which(name: str, extra_dirs: Sequence[str] = ()) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in extra_dirs:
        candidate = Path(directory) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _runs(command: Sequence[str]) -> bool:
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- base class


class Server(abc.ABC):
    """Common shape: ``start()``, ``stop()``, ``restart()``, ``url``, ``pid``, ``port``.

    All files live under ``base_dir``; the port is chosen once and kept across restarts.
    """

    kind: ClassVar[str]
    env_var: ClassVar[str]

    def __init__(self, base_dir: str | os.PathLike[str], *, port: int | None = None) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.port = port if port is not None else find_free_port()

    @property
    @abc.abstractmethod
    def url(self) -> str: ...

    @property
    @abc.abstractmethod
    def pid(self) -> int | None: ...

    @abc.abstractmethod
    def start(self, timeout: float = START_TIMEOUT) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        pid = self.pid
        return pid is not None and pid_alive(pid)

    def info(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pid": self.pid,
            "port": self.port,
            "url": self.url,
            "base_dir": str(self.base_dir),
        }

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url} pid={self.pid} dir={self.base_dir}>"


# --------------------------------------------------------------------------- PostgreSQL


def _ensure_pg_user() -> pwd.struct_passwd:
    """Create the unprivileged system user that runs PostgreSQL under root; idempotent."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(PG_USER)
    useradd = _which("useradd", ("/usr/sbin", "/sbin")) or "useradd"
    result = subprocess.run(
        [
            useradd,
            "--system",
            "--no-create-home",
            "--user-group",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            PG_USER,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        # Exit code 9 is "already exists": another process created it in the meantime.
        return pwd.getpwnam(PG_USER)
    except KeyError:
        raise ServerError(
            f"could not create user {PG_USER!r} (useradd exit {result.returncode}): "
            f"{result.stderr.strip()}"
        ) from None


def _make_traversable(path: Path) -> None:
    """Add o+x to ``path``'s ancestors that lack it, so another user can reach ``path``."""
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            _log(f"chmod o+x {parent} (so {PG_USER} can reach {path})")
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


class PostgresServer(Server):
    """A PostgreSQL 15 cluster in ``base_dir/data`` with superuser ``postgres`` and trust auth.

    ``start()`` runs initdb when the data directory is empty and otherwise starts the existing
    cluster, so ``restart()`` keeps the port, the data and the configuration. As root, every
    PostgreSQL program runs as the system user ``blamequeue-pg``, which owns the data directory.
    fsync stays on: the benchmarks measure durable commits.
    """

    kind = "postgres"
    env_var = "BLAMEQUEUE_TEST_POSTGRES_URL"
    superuser = "postgres"
    max_connections = 200

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        extra_config: Sequence[str] = (),
    ) -> None:
        super().__init__(base_dir, port=port)
        self.extra_config = tuple(extra_config)  # postgresql.conf lines, e.g. for profiling
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "postgres.log"
        self._bin_dir = self._find_bin_dir()
        self._user = _ensure_pg_user() if os.geteuid() == 0 else None

    @staticmethod
    def _find_bin_dir() -> Path:
        initdb = _which("initdb", PG_BIN_DIRS)
        if initdb is None:
            raise ServerError(f"initdb not found on PATH or in {', '.join(PG_BIN_DIRS)}")
        # /usr/local/bin/initdb may be a symlink into the real bin dir, next to pg_ctl.
        return Path(initdb).resolve().parent

    @property
    def url(self) -> str:
        return f"postgres://{self.superuser}@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, from the first line of ``postmaster.pid``."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first)
        except (OSError, ValueError):
            return None

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return env

    def _run(self, *args: str, check: bool = True, timeout: float = 120.0) -> int:
        """Run a PostgreSQL program (as ``blamequeue-pg`` under root), output to the log."""
        command = [str(self._bin_dir / args[0]), *args[1:]]
        user_kwargs: dict[str, Any] = {}
        if self._user is not None:
            user_kwargs = {
                "user": self._user.pw_uid,
                "group": self._user.pw_gid,
                "extra_groups": [],
            }
        with self.log_file.open("ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.base_dir,
                env=self._env(),
                # pg_ctl start detaches the postmaster itself; a new session keeps a Ctrl-C on
                # the terminal from reaching it in the window before it does.
                start_new_session=True,
                timeout=timeout,
                check=False,
                **user_kwargs,
            )
        if check and result.returncode != 0:
            raise ServerError(f"{args[0]} exited with {result.returncode}\n{_tail(self.log_file)}")
        return result.returncode

    def _chown(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _prepare_dirs(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.touch()
        if self._user is not None:
            self.base_dir.chmod(0o755)
            _make_traversable(self.base_dir)
            self._chown(self.log_file)
        socket_path = self.data_dir / f".s.PGSQL.{self.port}"
        if len(str(socket_path).encode()) > _MAX_SOCKET_PATH:
            raise ServerError(f"data dir path too long for a Unix socket: {socket_path}")

    def _initdb(self) -> None:
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        self._chown(self.data_dir)
        # --no-sync only skips initdb's final flush of the template files, which a throwaway
        # cluster never needs after a power loss; the server itself runs with fsync=on.
        self._run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            self.superuser,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        )
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# --- tests/servers.py ---\n"
                "listen_addresses = '127.0.0.1'\n"
                f"port = {self.port}\n"
                f"unix_socket_directories = '{self.data_dir}'\n"
                f"max_connections = {self.max_connections}\n"
                "fsync = on\n"
                "synchronous_commit = on\n"
                "full_page_writes = on\n" + "".join(f"{line}\n" for line in self.extra_config)
            )
        (self.data_dir / "pg_hba.conf").write_text(
            "# TYPE  DATABASE  USER  ADDRESS       METHOD\n"
            "local   all       all                 trust\n"
            "host    all       all   127.0.0.1/32  trust\n"
        )

    def _accepts_connections(self) -> bool:
        try:
            import psycopg
        except ImportError:
            code = subprocess.run(
                [
                    str(self._bin_dir / "pg_isready"),
                    "-q",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    self.superuser,
                    "-d",
                    "postgres",
                    "-t",
                    "2",
                ],
                stdin=subprocess.DEVNULL,
                env=self._env(),
                check=False,
            ).returncode
            return code == 0
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the cluster (initdb first if needed) and return once it accepts connections."""
        if self.running:
            raise ServerError(f"{self!r} is already running")
        self._prepare_dirs()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._clear_stale_lock()
        log_offset = self.log_file.stat().st_size
        self._run("pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.log_file), "-W")
        seen: list[int] = []

        def ready() -> bool:
            pid = self.pid
            if pid is None:
                # No lock file yet, or the postmaster wrote it and exited again (e.g. the port
                # is taken). Before the lock file exists no client can connect, so a FATAL in
                # the log is the postmaster's own.
                if seen or b"FATAL:" in self._log_since(log_offset):
                    raise ServerError(f"postgres exited during startup\n{_tail(self.log_file)}")
                return False
            seen.append(pid)
            # postmaster.pid survives a SIGKILL: trust it only while that process lives.
            if not pid_alive(pid):
                raise ServerError(f"postgres {pid} exited during startup\n{_tail(self.log_file)}")
            return self._accepts_connections()

        if not _poll(ready, timeout, interval=0.1):
            self._kill_after_failed_start()
            raise ServerError(
                f"postgres on port {self.port} not ready after {timeout:.0f}s\n"
                f"{_tail(self.log_file)}"
            )

    def _shm_id(self) -> int | None:
        """The System V shared memory id recorded in ``postmaster.pid`` (line 7: key, id)."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            return int(lines[6].split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def _shm_attached(self, shm_id: int) -> bool:
        try:
            table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        except OSError:
            return False
        for row in table:
            fields = row.split()
            if len(fields) > 6 and fields[1] == str(shm_id):
                return fields[6] != "0"
        return False

    def _wait_backends_gone(self, timeout: float = STOP_TIMEOUT) -> None:
        """After the postmaster was SIGKILLed, wait for its orphaned children to exit.

        They notice the postmaster's death within moments; until then they hold its shared
        memory and a new postmaster on this data dir refuses to start.
        """
        shm_id = self._shm_id()
        if shm_id is not None and not _poll(lambda: not self._shm_attached(shm_id), timeout):
            raise ServerError(f"backends of a dead postmaster still attached to shm {shm_id}")

    def _clear_stale_lock(self) -> None:
        pid = self.pid
        if pid is None or pid_alive(pid):
            return
        self._wait_backends_gone()
        # The new postmaster would refuse lock files naming a pid that kill(pid, 0) still finds,
        # which an exited but not yet reaped postmaster (a zombie) is; and the readiness probe
        # would read the dead pid before the new postmaster overwrites postmaster.pid.
        (self.data_dir / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)

    def _log_since(self, offset: int) -> bytes:
        try:
            with self.log_file.open("rb") as log:
                log.seek(offset)
                return log.read()
        except OSError:
            return b""

    def _kill_after_failed_start(self) -> None:
        pid = self.pid
        if pid is not None:
            terminate_pid(pid, signal.SIGQUIT, timeout=10.0, expect="postgres")

    def stop(self, mode: PostgresStopMode = "fast", timeout: float = STOP_TIMEOUT) -> None:
        """Stop the postmaster; ``immediate`` skips the shutdown checkpoint (crash recovery).

        pg_ctl does the shutdown; if it fails, the postmaster is signalled by pid (SIGINT for
        fast, SIGQUIT for immediate) and SIGKILLed after ``timeout``.
        """
        pid = self.pid
        if pid is None:
            return
        if not pid_alive(pid):
            self._wait_backends_gone(timeout)
            return
        code = self._run(
            "pg_ctl",
            "stop",
            "-D",
            str(self.data_dir),
            "-m",
            mode,
            "-W",
            check=False,
            timeout=timeout,
        )
        if code == 0 and wait_pid_gone(pid, timeout):
            return
        _log(f"pg_ctl stop (exit {code}) did not stop it; signalling postgres pid {pid}")
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        terminate_pid(pid, sig, timeout=timeout, expect="postgres")
        self._wait_backends_gone(timeout)

    def kill(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGKILL the postmaster (a crash) and wait until it and its backends are gone."""
        pid = self.pid
        if pid is not None:
            terminate_pid(pid, signal.SIGKILL, timeout=timeout, expect="postgres")
            self._wait_backends_gone(timeout)

    def restart(self, mode: PostgresStopMode = "fast") -> None:
        """Stop and start again with the same port and data dir (clients see disconnects)."""
        self.stop(mode)
        self.start()

    def info(self) -> dict[str, Any]:
        return {**super().info(), "data_dir": str(self.data_dir)}


# --------------------------------------------------------------------------- Redis


class RedisServer(Server):
    """``redis-server`` on 127.0.0.1, daemonized, pid from its pidfile, data in ``base_dir``.

    ``appendonly`` is ``"no"`` (nothing persisted, a restart comes back empty), ``"everysec"``
    or ``"always"`` (AOF with that fsync policy; a restart replays it). ``extra_config`` lines
    are appended to redis.conf (an ACL ``user``, a ``tls-port`` …); the plain port stays, for
    the readiness probe.
    """

    kind = "redis"
    env_var = "BLAMEQUEUE_TEST_REDIS_URL"

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        appendonly: AppendOnly = "no",
        extra_config: Sequence[str] = (),
    ) -> None:
        super().__init__(base_dir, port=port)
        self.appendonly = appendonly
        self.extra_config = tuple(extra_config)
        self.conf_file = self.base_dir / "redis.conf"
        self.pid_file = self.base_dir / "redis.pid"
        self.log_file = self.base_dir / "redis.log"
        binary = _which("redis-server")
        if binary is None:
            raise ServerError("redis-server not found on PATH (apt-get install redis-server)")
        self._binary = binary

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _write_conf(self) -> None:
        aof = "no" if self.appendonly == "no" else "yes"
        fsync = "everysec" if self.appendonly == "no" else self.appendonly
        self.conf_file.write_text(
            "bind 127.0.0.1\n"
            "protected-mode yes\n"
            f"port {self.port}\n"
            "daemonize yes\n"
            f"pidfile {self.pid_file}\n"
            f"logfile {self.log_file}\n"
            f"dir {self.base_dir}\n"
            'save ""\n'
            f"appendonly {aof}\n"
            f"appendfsync {fsync}\n" + "".join(f"{line}\n" for line in self.extra_config)
        )

    def _pong(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start (replaying the AOF if there is one) and return once it answers PING."""
        if self.running:
            raise ServerError(f"{self!r} is already running")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._write_conf()
        # A SIGKILLed server leaves its pidfile behind; never read that pid as the new one.
        self.pid_file.unlink(missing_ok=True)
        with self.log_file.open("ab") as log:
            code = subprocess.run(
                [self._binary, str(self.conf_file)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.base_dir,
                start_new_session=True,
                check=False,
            ).returncode
        if code != 0:
            raise ServerError(f"redis-server exited with {code}\n{_tail(self.log_file)}")

        def ready() -> bool:
            pid = self.pid
            if pid is not None and not pid_alive(pid):
                raise ServerError(f"redis {pid} exited during startup\n{_tail(self.log_file)}")
            return pid is not None and self._pong()

        if not _poll(ready, timeout):
            self.stop(kill=True)
            raise ServerError(
                f"redis on port {self.port} not ready after {timeout:.0f}s\n{_tail(self.log_file)}"
            )

    def stop(self, kill: bool = False, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (clean shutdown) or, with ``kill``, SIGKILL (a crash: no final AOF fsync)."""
        pid = self.pid
        if pid is None:
            return
        terminate_pid(
            pid, signal.SIGKILL if kill else signal.SIGTERM, timeout=timeout, expect="redis"
        )
        self.pid_file.unlink(missing_ok=True)

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def info(self) -> dict[str, Any]:
        return {**super().info(), "appendonly": self.appendonly}


class RedisClusterServer(Server):
    """A Redis Cluster on 127.0.0.1: ``masters`` primaries with one replica each (6 nodes by
    default), every node a ``RedisServer`` under ``base_dir/nodeN`` with its own port and bus
    port, joined by ``redis-cli --cluster create … --cluster-replicas 1``.

    Ready once every node answers ``CLUSTER INFO`` with ``cluster_state:ok`` and knows all the
    others. ``node_timeout_ms`` is how long a silent primary takes to be failed over (kept short
    for the fault tests). ``url`` is the first node's: a cluster client discovers the rest.
    """

    kind = "redis_cluster"
    env_var = "BLAMEQUEUE_TEST_REDIS_CLUSTER_URL"

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        masters: int = 3,
        appendonly: AppendOnly = "no",
        node_timeout_ms: int = 2000,
        ports: Sequence[int] = (),
    ) -> None:
        super().__init__(base_dir, port=port)
        count = masters * 2
        chosen = list(ports) or [self.port, *(find_free_port() for _ in range(count - 1))]
        self.port = chosen[0]
        self.nodes = [
            RedisServer(
                self.base_dir / f"node{i}",
                port=node_port,
                appendonly=appendonly,
                extra_config=(
                    "cluster-enabled yes",
                    "cluster-config-file nodes.conf",
                    f"cluster-node-timeout {node_timeout_ms}",
                    "repl-diskless-sync-delay 0",  # a replica's first sync at once, not in 5 s
                    f"cluster-port {find_free_port()}",
                    # a replica may always be promoted, however long it was cut off
                    "cluster-replica-validity-factor 0",
                ),
            )
            for i, node_port in enumerate(chosen[:count])
        ]
        cli = _which("redis-cli")
        if cli is None:
            raise ServerError("redis-cli not found on PATH (apt-get install redis-tools)")
        self._cli = cli

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.nodes[0].pid

    @property
    def running(self) -> bool:
        return any(node.running for node in self.nodes)

    def cli(self, port: int, *args: str, timeout: float = 10.0) -> str:
        """``redis-cli -p PORT ARGS…`` against one node: its output, or "" when it failed."""
        done = subprocess.run(
            [self._cli, "-h", "127.0.0.1", "-p", str(port), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return done.stdout if done.returncode == 0 else ""

    def topology(self) -> list[dict[str, Any]]:
        """``CLUSTER NODES`` as one dict per node: id, port, role, primary id, slot ranges,
        whether it is failing. Read from the first node that answers."""
        for node in self.nodes:
            text = self.cli(node.port, "cluster", "nodes") if node.running else ""
            if text:
                break
        else:
            return []
        rows = []
        for line in text.splitlines():
            fields = line.split()
            flags = fields[2].split(",")
            rows.append(
                {
                    "id": fields[0],
                    "port": int(fields[1].split("@")[0].rsplit(":", 1)[1]),
                    "role": "master" if "master" in flags else "replica",
                    "primary": None if fields[3] == "-" else fields[3],
                    "failing": "fail" in flags or "fail?" in flags,
                    "slots": fields[8:],
                }
            )
        return rows

    def primaries(self) -> list[dict[str, Any]]:
        """The live primaries that serve slots."""
        return [
            n for n in self.topology() if n["role"] == "master" and n["slots"] and not n["failing"]
        ]

    def _replicas(self) -> int:
        return sum(1 for n in self.topology() if n["role"] == "replica")

    def _replicas_synced(self) -> bool:
        ports = [n["port"] for n in self.topology() if n["role"] == "replica"]
        return all(
            "master_link_status:up" in self.cli(port, "info", "replication", timeout=2.0)
            for port in ports
        )

    def replica_of(self, primary_port: int) -> int:
        rows = self.topology()
        primary = next(n["id"] for n in rows if n["port"] == primary_port)
        return int(next(n["port"] for n in rows if n["primary"] == primary))

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def _healthy(self, node: RedisServer) -> bool:
        text = self.cli(node.port, "cluster", "info", timeout=2.0)
        return "cluster_state:ok" in text and f"cluster_known_nodes:{len(self.nodes)}" in text

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        """Until every running node says ``cluster_state:ok`` (slots covered, nodes known)."""
        live = [n for n in self.nodes if n.running]
        if not _poll(lambda: all(self._healthy(n) for n in live), timeout, interval=0.1):
            raise ServerError(
                f"redis cluster on {[n.port for n in live]} not ok after {timeout:.0f}s\n"
                + self.cli(live[0].port, "cluster", "info")
            )

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start every node; on a first start, create the cluster. Return once it is ok."""
        if self.running:
            raise ServerError(f"{self!r} is already running")
        fresh = not (self.nodes[0].base_dir / "nodes.conf").exists()
        try:
            for node in self.nodes:
                node.start(timeout)
            if fresh:
                addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
                options = ["--cluster-replicas", "1", "--cluster-yes"]
                done = subprocess.run(
                    [self._cli, "--cluster", "create", *addresses, *options],
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
                if done.returncode != 0:
                    raise ServerError(f"redis-cli --cluster create failed\n{done.stdout}")
            self.wait_healthy(timeout)
            if fresh:  # the replicas are told their primary last: wait until all know it
                replicas = len(self.nodes) // 2
                if not _poll(lambda: self._replicas() == replicas, timeout, interval=0.1):
                    raise ServerError(f"the replicas of {self!r} never attached")
            # A replica is a copy only once its first sync is done: until then a failover
            # would promote an empty node.
            if not _poll(self._replicas_synced, timeout, interval=0.1):
                raise ServerError(f"the replicas of {self!r} never finished their first sync")
        except BaseException:
            self.stop(kill=True)
            raise

    def stop(self, kill: bool = False, timeout: float = STOP_TIMEOUT) -> None:
        for node in self.nodes:
            node.stop(kill=kill, timeout=timeout)

    def info(self) -> dict[str, Any]:
        return {
            **super().info(),
            "pids": [n.pid for n in self.nodes],
            "ports": [n.port for n in self.nodes],
        }


# --------------------------------------------------------------------------- moto (SQS)


class MotoServer(Server):
    """moto's standalone server (``moto_server``) as a subprocess, for SQS.

    State is in memory only: a restart comes back empty. The executable is ``moto_server`` next
    to the running interpreter, then on PATH, then ``python -m moto.server``.
    """

    kind = "sqs"
    env_var = "BLAMEQUEUE_TEST_SQS_URL"

    def __init__(self, base_dir: str | os.PathLike[str], *, port: int | None = None) -> None:
        super().__init__(base_dir, port=port)
        self.log_file = self.base_dir / "moto.log"
        self._command = self._find_command()
        self._process: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    @staticmethod
    def _find_command() -> list[str]:
        sibling = Path(sys.executable).parent / "moto_server"
        if os.access(sibling, os.X_OK):
            return [str(sibling)]
        if importlib.util.find_spec("moto") is not None:
            return [sys.executable, "-m", "moto.server"]
        on_path = shutil.which("moto_server")
        # A pyenv shim is on PATH even where the active Python lacks moto: try it first.
        if on_path is not None and _runs([on_path, "--help"]):
            return [on_path]
        raise ServerError("moto_server not found (pip install 'moto[server]')")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._pid

    def _responds(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2.0)
        try:
            conn.request("GET", "/moto-api/")
            return conn.getresponse().status < 500
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and return once it answers HTTP."""
        if self.running:
            raise ServerError(f"{self!r} is already running")
        if _tcp_open(self.port):
            raise ServerError(f"port {self.port} is already in use")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self._process = subprocess.Popen(
                [*self._command, "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.base_dir,
                start_new_session=True,
            )
        self._pid = self._process.pid

        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise ServerError(
                    f"moto_server exited with {self._process.returncode}\n{_tail(self.log_file)}"
                )
            return self._responds()

        if not _poll(ready, timeout, interval=0.1):
            self.stop()
            raise ServerError(
                f"moto_server on port {self.port} not ready after {timeout:.0f}s\n"
                f"{_tail(self.log_file)}"
            )

    def stop(self, kill: bool = False, timeout: float = STOP_TIMEOUT) -> None:
        pid = self._pid
        if pid is None:
            return
        sig = signal.SIGKILL if kill else signal.SIGTERM
        if self._process is not None:
            # Our own child: signal and reap it, or it lingers as a zombie.
            if self._process.poll() is None:
                self._process.send_signal(sig)
                try:
                    self._process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(10.0)
            self._process = None
        else:
            terminate_pid(pid, sig, timeout=timeout, expect="moto")
        self._pid = None

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()


# --------------------------------------------------------------------------- command line

_STATE_FILE = "server.json"


def _read_state(directory: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((directory / _STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _log(f"ignoring unreadable {directory / _STATE_FILE}: {exc}")
        return None
    return data


def _write_state(directory: Path, server: Server) -> None:
    path = directory / _STATE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(server.info(), indent=2) + "\n")
    tmp.replace(path)


def _stop_from_state(kind: str, directory: Path, state: dict[str, Any]) -> None:
    pid = state.get("pid")
    port = state.get("port")
    if kind == "postgres" and isinstance(port, int):
        pg = PostgresServer(directory, port=port)
        if pg.pid is not None:
            pg.stop()
    elif kind == "redis" and isinstance(port, int) and shutil.which("redis-server"):
        RedisServer(directory, port=port).stop()
    elif kind == "redis_cluster" and shutil.which("redis-server") and shutil.which("redis-cli"):
        RedisClusterServer(directory, ports=state.get("ports") or ()).stop()
    # Whatever the server-specific path did, the recorded pids must be gone afterwards.
    for other in state.get("pids") or ():
        if isinstance(other, int):
            terminate_pid(other, signal.SIGTERM, expect="redis")
    # Whatever the server-specific path did, the recorded pid must be gone afterwards.
    if isinstance(pid, int):
        expect = {"postgres": "postgres", "redis": "redis", "redis_cluster": "redis"}.get(
            kind, "moto"
        )
        sig = signal.SIGINT if kind == "postgres" else signal.SIGTERM
        terminate_pid(pid, sig, expect=expect)


def _cli_stop(kind: str, directory: Path) -> int:
    state = _read_state(directory)
    if state is None:
        _log(f"no {kind} server recorded in {directory}; nothing to stop")
        return 0
    _stop_from_state(kind, directory, state)
    (directory / _STATE_FILE).unlink(missing_ok=True)
    _log(f"stopped {kind} pid {state.get('pid')}")
    return 0


def _cli_start(kind: str, directory: Path, args: argparse.Namespace) -> int:
    directory = directory.absolute()
    state = _read_state(directory)
    if state is not None:
        _log(f"stopping the {kind} server left over in {directory} (pid {state.get('pid')})")
        _stop_from_state(kind, directory, state)
        (directory / _STATE_FILE).unlink(missing_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    server: Server
    if kind == "postgres":
        # Each CLI start is a fresh cluster; restart() in-process is what keeps the data.
        shutil.rmtree(directory / "data", ignore_errors=True)
        (directory / "postgres.log").unlink(missing_ok=True)
        server = PostgresServer(directory, port=args.port)
    elif kind == "redis":
        for name in ("appendonly.aof", "appendonlydir", "dump.rdb", "redis.log"):
            target = directory / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        server = RedisServer(directory, port=args.port, appendonly=args.appendonly)
    elif kind == "redis_cluster":
        shutil.rmtree(directory, ignore_errors=True)  # nodes.conf included: a fresh cluster
        directory.mkdir(parents=True)
        server = RedisClusterServer(directory, port=args.port, appendonly=args.appendonly)
    else:
        (directory / "moto.log").unlink(missing_ok=True)
        server = MotoServer(directory, port=args.port)
    server.start()
    _write_state(directory, server)
    _log(f"started {kind} pid {server.pid} on port {server.port} (dir {directory})")
    print(f"{server.env_var}={server.url}", flush=True)
    return 0


def _cli_available(kind: str) -> int:
    try:
        if kind == "postgres":
            PostgresServer._find_bin_dir()
        elif kind == "redis":
            if _which("redis-server") is None:
                raise ServerError("redis-server not found on PATH")
        elif kind == "redis_cluster":
            if _which("redis-server") is None or _which("redis-cli") is None:
                raise ServerError("redis-server or redis-cli not found on PATH")
        else:
            MotoServer._find_command()
    except ServerError as exc:
        _log(f"{kind} unavailable: {exc}")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.servers", description="Start or stop a throwaway test server."
    )
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument(
        "action",
        choices=("start", "stop", "available"),
        help="available: exit 0 if this server's programs are installed, else 1",
    )
    parser.add_argument("--dir", type=Path, help="directory for all its files (start, stop)")
    parser.add_argument("--port", type=int, default=None, help="default: a free high port")
    parser.add_argument(
        "--appendonly", choices=("no", "everysec", "always"), default="no", help="redis only"
    )
    args = parser.parse_args(argv)
    if args.action != "available" and args.dir is None:
        parser.error(f"{args.action} needs --dir")
    try:
        if args.action == "available":
            return _cli_available(args.kind)
        if args.action == "start":
            return _cli_start(args.kind, args.dir, args)
        return _cli_stop(args.kind, args.dir)
    except ServerError as exc:
        _log(f"error: {exc}")
        return 1
    except OSError as exc:
        if exc.errno == errno.EPERM:
            _log(f"error: {exc} (PostgreSQL under root needs useradd and chown)")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
