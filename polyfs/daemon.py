"""Daemon lifecycle: checks, store, catalog, pyfuse3 init/main/close, signals,
readiness (a pipe to the waiting parent, and sd_notify for systemd).

``polyfs mount`` returns only once the mount is live (or with one clear error
line); in the background it forks, and the child reports "ready" or the
error through a pipe before the parent exits.
"""
from __future__ import annotations

import errno
import logging
import logging.handlers
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable

from . import config as config_mod
from . import memory
from .errors import MountError, PolyfsError, one_line

if TYPE_CHECKING:
    from .store.base import Store

log = logging.getLogger("polyfs")


# -- checks ----------------------------------------------------------------
def mount_path(path: str) -> str:
    """``path`` made absolute with its directories' symlinks resolved, without touching
    ``path`` itself: resolving a mountpoint stats the mounted file system's root, and the
    root of a mount whose daemon died while requests waited never answers (``polyfs
    umount`` of it hung where it is needed most)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _mountinfo_field(mountpoint: str, pick: Callable[[list[str]], str]) -> str | None:
    """``pick(fields)`` of the mountinfo line of ``mountpoint``, else None. Looked up as given
    first; only a path that names no mount (a symlink to the mountpoint) is resolved whole."""
    given = mount_path(mountpoint)
    got = _mountinfo_line(given, pick)
    if got is None:
        resolved = os.path.realpath(mountpoint)
        if resolved != given:
            got = _mountinfo_line(resolved, pick)
    return got


def _unescape(field: str) -> str:
    """A mountinfo path field as the path it names: the kernel writes space, tab, newline and
    backslash as octal escapes and every other byte as it is (UTF-8 names stay UTF-8, which
    ``unicode_escape`` turned into mojibake: a mount on ``/mnt/ü`` was "not mounted")."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mountinfo_line(target: str, pick: Callable[[list[str]], str]) -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding=sys.getfilesystemencoding(), errors="surrogateescape") as f:
            for line in f:
                parts = line.split()
                if _unescape(parts[4]) == target:
                    return pick(parts)
    except (OSError, ValueError, IndexError):
        return None
    return None


def mounted_fs(mountpoint: str) -> str | None:
    """The filesystem type mounted at ``mountpoint`` (from mountinfo), else None."""
    return _mountinfo_field(mountpoint, lambda parts: parts[parts.index("-") + 1])


def _alive(mountpoint: str) -> bool:
    """False for a FUSE mount whose daemon is gone (ENOTCONN / ECONNABORTED)."""
    try:
        os.listdir(mountpoint)
        return True
    except OSError as exc:
        return exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED)


def preflight(cfg: config_mod.MountConfig) -> None:
    """Everything that can be checked before mounting, each with one clear message."""
    mp = cfg.mountpoint
    try:
        st = os.stat(mp)
    except FileNotFoundError:
        raise MountError(f"mountpoint {mp} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            raise MountError(f"mountpoint {mp} is a dead FUSE mount; run 'polyfs umount {mp}' first") from None
        raise MountError(f"mountpoint {mp}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise MountError(f"mountpoint {mp} is not a directory")
    fstype = mounted_fs(mp)
    if fstype is not None or os.path.ismount(mp):
        if fstype and fstype.startswith("fuse") and not _alive(mp):
            raise MountError(f"mountpoint {mp} is a dead FUSE mount; run 'polyfs umount {mp}' first")
        raise MountError(f"mountpoint {mp} is busy (something is already mounted there)")
    try:
        dev = os.stat("/dev/fuse")
    except OSError:
        raise MountError("/dev/fuse does not exist (load the fuse module, or give the container /dev/fuse)") from None
    if not stat.S_ISCHR(dev.st_mode):
        raise MountError("/dev/fuse is not the FUSE character device")
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
    except OSError as exc:
        raise MountError(f"cannot open /dev/fuse: {exc.strerror}") from None
    if "allow_other" in cfg.fuse_options and os.geteuid() != 0 and not _user_allow_other():
        raise MountError("allow_other needs 'user_allow_other' in /etc/fuse.conf when not mounting as root")


def _user_allow_other(conf: str = "/etc/fuse.conf") -> bool:
    """fusermount3 lets a non-root user mount with allow_other only if fuse.conf says so."""
    try:
        with open(conf) as f:
            return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in f)
    except OSError:
        return False


def open_checked_store(cfg: config_mod.MountConfig) -> "Store":
    from .importers import check_store_path
    from .store import open_store

    check_store_path(cfg.store)  # a file named as the store: not "does not exist"
    try:
        store = open_store(cfg.store, read_only=cfg.read_only)  # writable: polyfs keeps derived data
        store.list_dir("")  # reachable, listable (bucket exists, credentials work)
    except PolyfsError as exc:
        raise MountError(f"cannot open store {cfg.store}: {one_line(exc)}") from None
    return with_chunk_cache(cfg, store)


def with_chunk_cache(cfg: config_mod.MountConfig, store: "Store") -> "Store":
    """A remote store behind the local chunk cache (``cache_dir``, ``cache_gb``; 0: off).
    A cache that cannot be set up costs speed, not the mount: one warning line."""
    if not store.url.startswith("s3://") or cfg.cache_gb <= 0:
        return store
    from .store.chunkcache import ChunkCacheStore

    try:
        cached = ChunkCacheStore(store, cfg.cache_dir or None, int(cfg.cache_gb * (1 << 30)), ttl=cfg.domain_ttl)
    except (OSError, PolyfsError) as exc:
        log.warning("no chunk cache for %s: %s", cfg.store, getattr(exc, "strerror", None) or one_line(exc))
        return store
    log.info("chunk cache for %s in %s (%.3g GiB)", cfg.store, cached.dir, cfg.cache_gb)
    return cached


def settle_read_only(cfg: config_mod.MountConfig) -> str | None:
    """A store that cannot be written (a read-only file system, a directory this user may not
    write) is mounted read-only rather than refused: reads are what most mounts are for, and
    every write then gets EROFS from the kernel instead of EIO from each failed put. Returns
    the one warning line to show, or None when nothing changes."""
    if cfg.read_only:
        return None
    from .store import open_store

    try:
        why = open_store(cfg.store, read_only=False).write_refusal()
    except PolyfsError:
        return None  # open_checked_store reports an unreachable store, with its reason
    if why is None:
        return None
    cfg.read_only = True
    return f"store {cfg.store} is not writable ({why}); mounting read-only"


# -- logging and readiness --------------------------------------------------
def setup_logging(cfg: config_mod.MountConfig, daemon: bool) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s polyfs[%(process)d] %(levelname)s %(name)s: %(message)s")
    if cfg.log_file:
        handler: logging.Handler = logging.FileHandler(cfg.log_file)
    elif daemon and os.path.exists("/dev/log"):
        handler = logging.handlers.SysLogHandler("/dev/log")
        fmt = logging.Formatter("polyfs[%(process)d]: %(levelname)s %(name)s: %(message)s")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    root.addHandler(handler)
    root.setLevel(cfg.log_level.upper())


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) about our state; a no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(message.encode())
    except OSError as exc:
        log.warning("sd_notify failed: %s", exc)


def tune_read_ahead(mountpoint: str, kb: int) -> None:
    """Raise the mount's read-ahead (DESIGN.md section 5: 128 KiB -> 4 MiB requests)."""
    if kb <= 0:
        return
    try:
        dev = os.stat(mountpoint).st_dev
        path = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
        with open(path, "w") as f:
            f.write(str(kb))
        log.debug("read_ahead_kb=%d for %s", kb, mountpoint)
    except OSError as exc:
        log.info("cannot set read_ahead_kb (%s); large reads stay at the kernel default", exc.strerror)


FUSECTL = "/sys/fs/fuse/connections"


def tune_fuse_connection(mountpoint: str, max_background: int) -> None:
    """Let the kernel keep ``max_background`` asynchronous requests (read-ahead, writes
    back) in flight on this mount instead of its default 12, through fusectl: libfuse's
    own setting is not reachable from pyfuse3. Where fusectl is not mounted (or we may
    not write it) the default stays, with one info line."""
    if max_background <= 0:
        return
    try:
        if os.geteuid() == 0 and os.path.isdir(FUSECTL) and not os.listdir(FUSECTL):
            # not mounted (systemd mounts it on most hosts; containers often do not)
            subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL], capture_output=True, timeout=10)
        dev = os.stat(mountpoint).st_dev
        conn = os.path.join(FUSECTL, str(os.minor(dev) if os.major(dev) == 0 else dev))
        with open(os.path.join(conn, "max_background"), "w") as f:
            f.write(str(max_background))
        with open(os.path.join(conn, "congestion_threshold"), "w") as f:
            f.write(str(max(1, max_background * 3 // 4)))
        log.debug("max_background=%d for %s", max_background, mountpoint)
    except OSError as exc:
        log.info("cannot raise the FUSE connection's max_background through %s (%s)", FUSECTL,
                 exc.strerror or exc)


# -- the FUSE connection, for umount --------------------------------------------------------
def connection_of(mountpoint: str) -> str | None:
    """The fusectl connection id of the FUSE mount at ``mountpoint`` (from mountinfo, without
    touching the mount: a stat of a hung one hangs)."""
    def conn(parts: list[str]) -> str:
        major, minor = parts[2].split(":")
        return minor if major == "0" else str(os.makedev(int(major), int(minor)))

    return _mountinfo_field(mountpoint, conn)


def _conn_file(conn: str) -> str:
    """Where the daemon serving connection ``conn`` leaves its pid."""
    base = "/run/polyfs" if os.geteuid() == 0 else os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/polyfs-{os.getuid()}"
    return os.path.join(base, f"conn-{conn}.pid")


def note_daemon(mountpoint: str) -> str | None:
    """Leave this daemon's pid by its connection id (``polyfs umount`` tells a dead daemon's
    connection from a live one's by it); returns the file, to be removed at exit."""
    conn = connection_of(mountpoint)
    if conn is None:
        return None
    path = _conn_file(conn)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "w") as f:
            f.write(f"{os.getpid()} {mount_path(mountpoint)}\n")
    except OSError as exc:
        log.debug("cannot note the daemon's pid in %s: %s", path, exc)
        return None
    return path


def dead_mount(mountpoint: str) -> bool:
    """Whether a polyfs mount is at ``mountpoint`` and its daemon is gone: the daemon noted by
    its connection has exited, or, unnoted, the mount answers ENOTCONN. A live mount (another
    instance's, one mounted by hand) is not dead, whoever asks."""
    if mounted_fs(mountpoint) != "fuse.polyfs":
        return False
    conn = connection_of(mountpoint)
    try:
        with open(_conn_file(conn or "none")) as f:
            pid_text, noted_at = f.read().split(maxsplit=1)
        if noted_at.strip() == mount_path(mountpoint):
            return _gone(int(pid_text))
    except (OSError, ValueError):
        pass
    return not _alive(mountpoint)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts: its threads may still be stuck)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and line.split()[1] in ("Z", "X") for line in f)
    except OSError:
        return True


def abort_dead_connection(mountpoint: str, conn: str | None) -> int | None:
    """If the daemon that served connection ``conn`` is gone, abort the connection through
    fusectl and return its pid. A daemon SIGKILLed while one of its threads waited in the
    kernel (a reverse invalidation waiting for a directory lock that a request to this very
    daemon held) could not finish dying: its /dev/fuse stayed open, so every process using
    the mount hung for ever in D state, unkillable, and a lazy unmount freed none of them.
    Aborting ends their requests (ECONNABORTED), and the daemon's last thread then exits."""
    if conn is None or mounted_fs(mountpoint) != "fuse.polyfs":
        return None
    path = _conn_file(conn)
    try:
        with open(path) as f:
            pid_text, noted_at = f.read().split(maxsplit=1)
        pid = int(pid_text)
        with open(os.path.join(FUSECTL, conn, "waiting")) as f:
            waiting = int(f.read().strip())
    except (OSError, ValueError):
        return None  # not noted, or the connection is gone already (the kernel aborted it)
    if noted_at.strip() != mount_path(mountpoint) or not waiting or not _gone(pid):
        return None  # another mount's note, nothing stuck, or the daemon is alive
    abort = os.path.join(FUSECTL, conn, "abort")
    try:
        with open(abort, "w") as f:
            f.write("1")
    except OSError as exc:
        log.debug("cannot abort FUSE connection %s: %s", conn, exc)
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return pid


# -- running ---------------------------------------------------------------
# What libfuse 3 takes in -o (fuse_session_new and mount.c): options outside polyfs's own that
# it refuses make fuse_session_new() fail with no word of which; the mount error names them.
KNOWN_FUSE_OPTIONS = frozenset((
    "allow_other", "allow_root", "auto_unmount", "default_permissions", "blkdev", "blksize", "fsname",
    "subtype", "max_read", "context", "fscontext", "defcontext", "rootcontext", "debug", "ro", "rw", "suid",
    "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "dirsync", "atime", "noatime", "nodiratime",
    "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "clone_fd",
    "max_idle_threads", "user", "nonempty"))


class _Utf8Option(str):
    """An option pyfuse3 passes on as UTF-8: it encodes every option as ASCII, so a store path
    with a non-ASCII name (``/srv/données``) failed the mount with a UnicodeEncodeError."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:  # noqa: ARG002
        return os.fsencode(str(self))


def fuse_options(cfg: config_mod.MountConfig) -> set[str]:
    import pyfuse3

    opts = set(pyfuse3.default_options)
    # The store URL names the mount in mount(8)/df output; commas would split options.
    opts |= {_Utf8Option("fsname=" + cfg.store.replace("\\", "\\\\").replace(",", "\\,")), "subtype=polyfs"}
    if cfg.read_only:
        opts.add("ro")
    opts |= set(cfg.fuse_options)
    return opts


ACL_ENTRY_TIMEOUT = 1.0  # kernel name/attribute caching on allow_other mounts (SEMANTICS.md, permissions)


def build_operations(cfg: config_mod.MountConfig, store=None):
    """The whole file system without the kernel: store, catalog, views, write side and
    the pyfuse3 operations over them (the daemon mounts this; tests await it directly)."""
    from .fs.operations import Operations
    from .model.catalog import Catalog
    from .reader import Reader
    from .views.base import ViewContext
    from .views.root import build_root

    if store is None:
        store = open_checked_store(cfg)
    ctx = ViewContext(Catalog(store), cfg.view_options())
    reader = Reader(ctx, cache_bytes=cfg.cache_mb << 20)
    root = build_root(ctx, cfg.view_names(), ttl=cfg.domain_ttl)
    service = budget = None
    if not cfg.read_only:
        from .fs.overlay import WriteBudget
        from .writes.router import Router
        from .writes.service import WriteService

        service = WriteService(ctx, Router(ctx.domains, ctx.catalog.load))
        budget = WriteBudget(max(1, cfg.write_buffer_mb) << 20, cfg.scratch_dir or None)
    access = None
    if "allow_other" in cfg.fuse_options:  # other local users reach the mount: domains' ACLs decide
        from .fs.access import AccessGate, LocalUsers, catalog_loader

        access = AccessGate(catalog_loader(ctx.catalog), ctx.catalog.generation,
                            LocalUsers(os.getuid(), os.getgid()), ttl=cfg.domain_ttl)
    shared = store.url.startswith("s3://")
    # Names and attributes the kernel keeps: entry_timeout, but never longer than domain_ttl
    # above domains (the domain list) nor, on shared stores, anywhere (other hosts' chunk
    # rewrites are found by re-listing, which says no more than "re-plan": kernelcache.py);
    # with ACLs at most ACL_ENTRY_TIMEOUT (a name one user looked up stats for all users).
    ttl = cfg.domain_ttl if cfg.domain_ttl > 0 else None
    timeout = min(cfg.entry_timeout, ttl) if shared and ttl else cfg.entry_timeout
    if access is not None:
        timeout = min(timeout, ACL_ENTRY_TIMEOUT)
    ops = Operations(root, reader, read_only=cfg.read_only, entry_timeout=timeout,
                     threads=cfg.threads, service=service, budget=budget, access=access, tree_timeout=ttl)
    if cfg.domain_ttl > 0:
        ctx.catalog.stale_after, ctx.catalog.stale_chunks_too = cfg.domain_ttl, shared  # idle domains too
        ctx.catalog.on_reread = ops.domains_changed
        watch_domains(ctx.catalog, cfg.domain_ttl, shared=shared, held=ops.kernel_domains,
                      changed=ops.domains_changed)
    return ops


def watch_domains(catalog, ttl: float, shared: bool, held: Callable[[], list[str]],
                  changed: Callable[[list[str]], None]) -> threading.Thread:
    """Every ``ttl`` seconds, re-read the domains in use, so what other daemons and hosts
    change in the store shows here within ``domain_ttl`` (SEMANTICS.md). ``shared``: an
    object store other hosts write to (their chunk rewrites are picked up as well).
    ``held()``: domains the kernel may still answer for from its caches, which count as in
    use (it does not ask the daemon about them meanwhile); ``changed(paths)``: told of what
    was found changed, so the kernel drops what it holds of it."""

    def loop() -> None:
        while True:
            time.sleep(ttl)
            try:
                for path in held():
                    catalog.generation(path)  # in use: re-read below
                paths = catalog.refresh_used(chunks_too=shared)
                for path in paths:
                    log.info("domain %s was changed by another writer: re-read", path)
                if paths:
                    changed(paths)
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                log.warning("re-reading domains failed: %s", one_line(exc))

    t = threading.Thread(target=loop, name="polyfs-domain-watch", daemon=True)
    t.start()
    return t


def run(cfg: config_mod.MountConfig, on_ready: Callable[[], None] | None = None) -> None:
    """Mount and serve until unmounted or signalled (blocks)."""
    import pyfuse3
    import trio

    preflight(cfg)
    memory.tune_malloc()
    ops = build_operations(cfg)
    try:
        pyfuse3.init(ops, cfg.mountpoint, fuse_options(cfg))
    except RuntimeError as exc:
        unknown = [o for o in cfg.fuse_options if o.split("=", 1)[0] not in KNOWN_FUSE_OPTIONS]
        why = f" (-o {','.join(unknown)}: neither a polyfs nor a FUSE option)" if unknown else ""
        raise MountError(f"cannot mount {cfg.mountpoint}: {exc}{why}") from None
    log.info("mounted %s on %s", cfg.store, cfg.mountpoint)

    noted: list[str | None] = []

    async def post_mount() -> None:
        await trio.to_thread.run_sync(tune_read_ahead, cfg.mountpoint, cfg.read_ahead_kb)
        await trio.to_thread.run_sync(tune_fuse_connection, cfg.mountpoint, cfg.max_background)
        noted.append(note_daemon(cfg.mountpoint))
        sd_notify(f"READY=1\nSTATUS=serving {cfg.store} on {cfg.mountpoint}")
        if on_ready is not None:
            on_ready()

    async def watch_signals() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:  # one line at the default level: why the mount went away
                log.warning("%s received: unmounting %s", signal.Signals(signum).name, cfg.mountpoint)
                sd_notify("STOPPING=1")
                pyfuse3.terminate()
                return

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_signals)
            nursery.start_soon(post_mount)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        try:
            pyfuse3.close(unmount=True)
        finally:
            for path in filter(None, noted):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            ops.reader.close()
            try:
                ops.reader.store.close()  # releases the chunk cache directory's lock
            except Exception as exc:  # noqa: BLE001 - unmounted either way
                log.debug("closing the store: %s", exc)
            log.info("unmounted %s", cfg.mountpoint)


def _daemonize_and_wait(cfg: config_mod.MountConfig, warning: str | None = None) -> int:
    """Fork; the child mounts and reports through a pipe; the parent waits for it
    (``warning``: a start-up warning the parent showed, for the daemon's log too)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(w)
        chunks = []
        while True:
            data = os.read(r, 4096)
            if not data:
                break
            chunks.append(data)
        os.close(r)
        try:
            os.waitpid(pid, 0)  # the intermediate child exits at once
        except ChildProcessError:
            pass
        msg = b"".join(chunks).decode(errors="replace")
        if msg.startswith("OK"):
            return 0
        text = msg[4:].strip() if msg.startswith("ERR ") else "the daemon exited before the mount was ready"
        print(f"polyfs: error: {text}", file=sys.stderr)
        return 1
    # child
    os.close(r)
    os.setsid()
    if os.fork() > 0:  # let the session leader go; the grandchild is the daemon
        os._exit(0)
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        setup_logging(cfg, daemon=True)
    except OSError as exc:  # checked before the fork; gone since
        os.write(w, f"ERR log file {cfg.log_file}: {exc.strerror or exc}\n".encode())
        os._exit(1)
    for line in (warning or "").splitlines():
        log.warning("%s", line)

    def ready() -> None:
        try:
            os.write(w, b"OK\n")
            os.close(w)
        except OSError:
            pass

    code = 0
    try:
        run(cfg, on_ready=ready)
    except PolyfsError as exc:
        log.error("%s", one_line(exc))
        try:
            os.write(w, f"ERR {one_line(exc)}\n".encode())
        except OSError:
            pass
        code = 1
    except BaseException as exc:  # noqa: BLE001 - report anything to the waiting parent
        log.exception("daemon failed")
        try:
            os.write(w, f"ERR {type(exc).__name__}: {one_line(exc)}\n".encode())
        except OSError:
            pass
        code = 1
    os._exit(code)


def hidden_entries(mountpoint: str) -> str | None:
    """A warning when the mountpoint holds files: FUSE 3 mounts over them, and they vanish
    from view until the unmount (a mistyped mountpoint looked like lost data)."""
    try:
        with os.scandir(mountpoint) as it:
            n = sum(1 for _ in it)
    except OSError:
        return None
    if not n:
        return None
    return f"mountpoint {mountpoint} is not empty: its {n} entries are hidden until the unmount"


def check_log_file(cfg: config_mod.MountConfig) -> None:
    """The log file can be opened, checked before forking: the daemon opens it first thing,
    with nowhere yet to say why it cannot ("the daemon exited before the mount was ready")."""
    if not cfg.log_file:
        return
    try:
        with open(cfg.log_file, "a"):
            pass
    except OSError as exc:
        raise MountError(f"log file {cfg.log_file}: {exc.strerror}") from None


def mount_command(args) -> int:
    cfg = config_mod.load(args)
    check_log_file(cfg)
    if cfg.foreground:
        setup_logging(cfg, daemon=False)
        preflight(cfg)
        hidden = hidden_entries(cfg.mountpoint)  # looked at before the mount covers them
        warning = settle_read_only(cfg)
        if warning:
            log.warning("%s", warning)
        run(cfg, on_ready=(lambda: log.warning("%s", hidden)) if hidden else None)
        return 0
    preflight(cfg)  # cheap checks before forking give the clearest errors
    hidden = hidden_entries(cfg.mountpoint)
    warning = settle_read_only(cfg)
    if warning:  # one line where the user looks (stderr), and in the daemon's log
        print(f"polyfs: warning: {warning}", file=sys.stderr)
    code = _daemonize_and_wait(cfg, "\n".join(filter(None, (warning, hidden))) or None)
    if code == 0 and hidden:  # only once mounted: a failed mount says its one error line alone
        print(f"polyfs: warning: {hidden}", file=sys.stderr)
    return code


def umount(mountpoint: str) -> None:
    """Unmount; lazily when the daemon is gone and the mountpoint is dead, or when files are
    still open (then one note on stderr: the mount is detached at once, but its daemon serves
    the open files, and stores what they write at their close, until the last one is closed;
    a new mount of the store meanwhile is a second daemon writing it)."""
    fstype = mounted_fs(mountpoint)
    if fstype is None:
        raise MountError(f"{mountpoint} is not mounted")
    if fstype != "fuse.polyfs":  # its fallback is umount -l: a typo must not detach /home
        raise MountError(f"{mountpoint} is a {fstype} mount, not a polyfs one; left alone")
    dead = abort_dead_connection(mountpoint, connection_of(mountpoint))
    if dead is not None:
        print(f"polyfs: note: the daemon of {mountpoint} (pid {dead}) is gone: its FUSE connection was "
              f"aborted, so processes still using the mount get an error (ECONNABORTED) instead of hanging", file=sys.stderr)
    busy = False
    for cmd in (["fusermount3", "-u", mountpoint], ["fusermount3", "-u", "-z", mountpoint],
                ["umount", "-l", mountpoint]):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            continue
        if res.returncode == 0 and mounted_fs(mountpoint) is None:
            if busy and dead is None and _alive_daemon(mountpoint):
                print(f"polyfs: note: {mountpoint} was busy (files open in it): detached now; its daemon "
                      f"stores what they write and exits when the last one is closed", file=sys.stderr)
            return
        busy = busy or "busy" in (res.stderr or "").lower()
    raise MountError(f"cannot unmount {mountpoint}")


def _alive_daemon(mountpoint: str) -> bool:
    """Whether a polyfs daemon serving ``mountpoint`` still runs (its command line names it)."""
    want = mount_path(mountpoint)
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"mount" in args and any(a and mount_path(os.fsdecode(a)) == want for a in args):
            return True
    return False
