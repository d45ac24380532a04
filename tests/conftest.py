"""Shared fixtures. ``tests/`` is on sys.path, so test modules can import
``support`` (view-context helpers) and ``corpus`` (source generators)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def fuse_available() -> bool:
    return os.path.exists("/dev/fuse") and os.geteuid() == 0


def polyfs_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "polyfs", *args]


class Mount:
    """A real FUSE mount of a store, by the real ``polyfs mount`` command."""

    def __init__(self, store: str, mountpoint: Path, log: Path, options: list[str]) -> None:
        self.store = store
        self.path = mountpoint
        self.log = log
        self.options = options

    def start(self, extra_args: list[str] | None = None) -> "Mount":
        args = ["mount", self.store, str(self.path), "--log-file", str(self.log), "--log-level", "info"]
        for o in self.options:
            args += ["-o", o]
        res = subprocess.run(polyfs_cmd(*args, *(extra_args or [])), capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise RuntimeError(f"polyfs mount failed: {res.stderr.strip()}\n{self.log_text()}")
        _STARTED.append(self)
        return self

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def daemon_pid(self) -> int:
        """The daemon process serving this mount (its command line names the mountpoint)."""
        want = os.path.realpath(self.path)
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"mount" in cmd and any(a and os.path.realpath(os.fsdecode(a)) == want for a in cmd):
                return int(pid)
        raise AssertionError(f"no daemon serves {self.path}")

    def stop(self) -> None:
        if not is_mounted(self.path):
            return
        subprocess.run(polyfs_cmd("umount", str(self.path)), capture_output=True, text=True, timeout=60)
        deadline = time.time() + 10
        while is_mounted(self.path) and time.time() < deadline:
            time.sleep(0.1)


_STARTED: list[Mount] = []  # every mount started in this worker, for failure reports
_LOG_TAIL = 60


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    item.stash[_FIRST_MOUNT] = len(_STARTED)


_FIRST_MOUNT = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report ends with the daemon logs of the mounts it started: a failure
    that happens once in CI is then explained by the daemon's own words."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed:
        return
    for m in _STARTED[item.stash.get(_FIRST_MOUNT, len(_STARTED)):]:
        lines = m.log_text().splitlines()[-_LOG_TAIL:]
        if lines:
            rep.sections.append((f"polyfs daemon log {m.log} (last {len(lines)} lines)", "\n".join(lines)))


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


@pytest.fixture
def mount_store(tmp_path_factory):
    """Factory: ``mount_store(store_url, *options) -> Mount`` (unmounted at teardown)."""
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    mounts: list[Mount] = []

    def make(store: str, *options: str) -> Mount:
        base = tmp_path_factory.mktemp("mnt")
        mp = base / "mnt"
        mp.mkdir()
        m = Mount(str(store), mp, base / "polyfs.log", list(options)).start()
        mounts.append(m)
        return m

    yield make
    for m in mounts:
        m.stop()


# -- a real local S3 endpoint (moto_server) ---------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "polyfs-test",
                "AWS_SECRET_ACCESS_KEY": "polyfs-test", "AWS_REGION": "us-east-1"}

    def create_bucket(self, name: str) -> str:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id="polyfs-test", aws_secret_access_key="polyfs-test").create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto_server on 127.0.0.1 at a free port; AWS_* variables point at it (and the chunk
    cache of S3 mounts at a temporary directory, not /var/cache/polyfs)."""
    import shutil
    import urllib.request

    exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not os.path.exists(exe):
        pytest.skip("moto_server is not installed")
    port = _free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.2)
    server = S3Server(endpoint)
    env = {**server.env(), "POLYFS_CACHE_DIR": str(tmp_path_factory.mktemp("chunk-cache"))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def rasterio():
    """rasterio (the test skips without it), its NotGeoreferencedWarning silenced."""
    import warnings

    rio = pytest.importorskip("rasterio")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NotGeoreferencedWarning
        yield rio
