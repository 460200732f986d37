"""The learner's zygote process (the notebook's side and the design: userzygote.py).

    python -m labkit.runtime.local.userzygote_main LISTEN_FD FOLDER KEY IDLE_SECONDS

It imports torch once, accepts its own user's notebooks only (SO_PEERCRED, every connection)
and forks each cluster's ranks, which take on what is their cluster's (zygote_main.child_for).
A rank watches its notebook (worker.py: a pidfd), and the zygote kills a notebook's ranks the
moment that notebook's connection closes (even when the kernel was SIGKILLed or a rank is
stopped): ranks die with their notebook, not with the zygote, whose death leaves them running.
The preloads (zygote_main.PRELOAD) come once it has had nothing to do for PRELOAD_AFTER
seconds: a notebook's first ranks do not wait for them; spares and later notebooks have them.
"""
import fcntl
import os
import pickle
import selectors
import signal
import socket
import sys
import time

from labkit.runtime import protocol
from labkit.runtime.local import userdir, zygote_main as zm
# (imported now, not where they are used: a zygote stops listening when its files change or go,
# and a copy of labkit that is gone by then could not be imported: ModuleNotFoundError)
from labkit.runtime.local.userzygote import Hello, Refused, take_lock

PRELOAD_AFTER = 2.0         # seconds without a request before the preloads start
UNUSED = 120.0              # the idle time of a zygote no notebook has used yet (prestart)
IMPORTS = ("torch", "torch.distributed", "labkit.runtime.learner", "labkit.runtime.wire",
           "labkit.runtime.worker", "labkit.runtime.local.netns", "labkit.runtime.protocol",
           "labkit.runtime.channel", "labkit.runtime.frames", "labkit.runtime.tasks",
           "labkit.runtime.context")             # (worker.start's imports among them)


class Client:
    def __init__(self, sock, pid: int):           # hello, the namespace fds, the ranks forked
        self.sock, self.pid, self.hello, self.fds, self.children = sock, pid, None, [], set()


class Server:
    """The socket, its notebooks, their children and when to stop (kernels_main.py's server is
    one too, with its own `stem`, `imports`, `serve` and hooks; `main` runs either)."""
    stem = "zygote"
    imports = IMPORTS                             # what every fork inherits
    subreaper = True                              # a rank's descendants end with the rank

    def loaded(self) -> None:
        """After the imports, and again after the preloads: which modules are the learner's,
        known in forks."""
        from labkit.runtime import learner
        learner.snapshot()

    def tidy(self) -> None:
        """After a child ended or a message came: end the descendants of ranks that have gone."""
        zm._kill_adopted(set(self.owner))

    def __init__(self, listen_fd: int, where: str, k: str, idle: float):
        self.where, self.idle = where, idle
        self.path = os.path.join(where, f"{self.stem}-{k}.sock")
        self.lock_path = os.path.join(where, "lock")          # one for every key: never removed
        self.log_path = os.path.join(where, f"{self.stem}-{k}.log")
        self.listener = socket.socket(fileno=listen_fd)
        try:
            self.ino = os.stat(self.path).st_ino
        except OSError:
            self.ino = None
        self.sel = selectors.DefaultSelector()   # not select.select: fds >= 1024
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.clients = {}                         # socket -> Client
        self.owner = {}                           # child pid -> Client (None once it left)
        self.watch = None
        self.last_seen = time.monotonic()         # a notebook was connected
        self.served = False                       # has a notebook said Hello yet?

    def _fds_to_close(self, client: Client) -> list:
        fds = [self.wake_r, self.wake_w]
        if self.listener is not None:
            fds.append(self.listener.fileno())
        if self.watch is not None and self.watch.fd is not None:
            fds.append(self.watch.fd)
        for c in self.clients.values():
            fds.append(c.sock.fileno())
            if c is not client:
                fds.extend(c.fds)
        return [fd for fd in fds if fd is not None and fd >= 0]

    def stop_listening(self, why: str) -> None:
        """No new notebook from now on (under the lock the notebooks take to connect): the
        socket goes, notebooks already waiting are refused and start a fresh zygote."""
        if self.listener is None:
            return
        print(f"labkit zygote {os.getpid()}: no new notebooks ({why})", file=sys.stderr, flush=True)
        lock = take_lock(self.where)
        try:
            try:
                if os.stat(self.path).st_ino == self.ino:
                    os.unlink(self.path)
            except OSError:
                pass
            self.listener.setblocking(False)
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    break
                try:
                    conn.send(pickle.dumps(Refused(why)))
                except OSError:
                    pass
                conn.close()
            self.sel.unregister(self.listener)
            self.listener.close()
            self.listener = None
        finally:
            os.close(lock)

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        pid, uid = userdir.peer_uid(conn)
        if uid != os.getuid():                    # another user: nothing is read, nothing forked
            conn.close()
            return
        why = self.watch.changed() if self.watch is not None else ""
        if why:
            try:
                conn.send(pickle.dumps(Refused(f"{why} changed on disk")))
            except OSError:                       # it has gone already: nothing to tell it
                pass
            conn.close()
            self.stop_listening(f"{why} changed on disk")
            return
        self.clients[conn] = Client(conn, pid)
        self.sel.register(conn, selectors.EVENT_READ)

    def drop(self, client: Client, gone: bool = True) -> None:
        """The notebook closed its cluster or died (`gone`: its folder goes too), or stopped
        reading: its ranks go with it."""
        if self.clients.pop(client.sock, None) is None:
            return
        self.sel.unregister(client.sock)
        client.sock.close()
        zm._kill_children(client.children)
        for fd in client.fds:
            os.close(fd)
        if gone and getattr(client.hello, "stack_dir", None):
            userdir.remove_cluster_folder(client.hello.stack_dir)
        self.last_seen = time.monotonic()

    def serve_safely(self, client: Client) -> None:
        """`serve`, where a fault while serving one notebook ends that notebook's ranks (its
        connection is dropped; it spawns instead), never the zygote that the user's other
        notebooks fork from. The traceback goes to the zygote's log."""
        import traceback
        try:
            self.serve(client)
        except Exception:                         # noqa: BLE001 - logged, that client dropped
            traceback.print_exc()
            try:
                self.drop(client, gone=False)     # (it forgets and closes the socket first)
            except Exception:                     # noqa: BLE001
                traceback.print_exc()
            sys.stderr.flush()

    def serve(self, client: Client) -> None:
        try:
            msg, fds, _, _ = socket.recv_fds(client.sock, 1 << 20, 8)
        except OSError:
            msg, fds = b"", []
        if not msg:
            for fd in fds:
                os.close(fd)
            self.drop(client)
            return
        if client.hello is None:
            try:
                hello = pickle.loads(msg)
            except Exception:                     # noqa: BLE001 - not a notebook of ours
                hello = None
            client.fds = fds
            if not isinstance(hello, Hello):      # (a process of this user, not a notebook)
                self.drop(client)
                return
            client.hello = hello
            self.served = True
            self.send(client, protocol.ZygoteReady(os.getpid()))
            return
        if msg != b"fork" or not fds:
            for fd in fds:
                os.close(fd)
            self.drop(client, gone=False)
            return
        close = self._fds_to_close(client) + fds[1:]   # (before the fork: nothing can raise after)
        try:
            pid = os.fork()
        except OSError:                           # (out of processes): the notebook spawns
            pid = None
        if pid == 0:
            zm.child_for(fds[0], client.hello, client.fds, client.pid, close)
        for f in fds:
            os.close(f)
        if pid is None:
            self.drop(client, gone=False)
            return
        client.children.add(pid)
        self.owner[pid] = client
        self.send(client, protocol.Forked(pid))

    def send(self, client: Client, msg) -> None:
        """Never waits: a notebook that stopped reading (its kernel stopped) must not stop the
        zygote for the user's other notebooks; it is dropped (its ranks end) instead."""
        try:
            client.sock.send(pickle.dumps(msg), socket.MSG_DONTWAIT)
        except OSError:
            self.drop(client, gone=False)

    def reap(self) -> bool:
        ended = False
        for pid, status in zm.reaped():
            client = self.owner.pop(pid, None)
            if client is None:
                continue                          # an adopted descendant (zm._kill_adopted)
            ended = True
            client.children.discard(pid)
            if client.sock in self.clients:
                self.send(client, protocol.Exited(pid, status))
        return ended

    def exit_if_unused(self) -> None:
        """Gone once no notebook has been here for `idle` seconds (or it was told to stop
        listening, and its notebooks have gone), unless one is connecting right now."""
        if self.clients or self.owner:
            return
        idle = self.idle if self.served else min(self.idle, UNUSED)   # (started ahead: prestart)
        if self.listener is not None and time.monotonic() - self.last_seen < idle:
            return
        try:
            lock = os.open(self.lock_path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            os._exit(0)                           # our folder is gone: nothing to clean
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            return                                # a notebook is connecting: serve it first
        if self.listener is not None:
            if self.sel.select(0):
                os.close(lock)
                return
            try:
                if os.stat(self.path).st_ino == self.ino:
                    os.unlink(self.path)
            except OSError:
                pass
        for path in (self.log_path, self.path[:-len(".sock")] + ".pid"):
            try:
                if path != self.log_path or os.path.getsize(path) == 0:
                    os.unlink(path)               # a clean exit: nothing to read there (a log
            except OSError:                       # that says why it stopped stays, as _sweep's)
                pass
        try:
            if os.listdir(self.where) == ["lock"] and os.fstat(lock).st_nlink:
                os.unlink(self.lock_path)         # the last one: the folder goes too
                os.rmdir(self.where)
        except OSError:
            pass
        os._exit(0)                               # (the lock goes with the process)


def main(server=Server) -> None:
    """Either server's process (`server`: Server, or kernels_main.KernelServer): detach, import,
    then serve until it is unused."""
    child = os.fork()                             # no one's child: its parent exits at once,
    if child:                                     # and says its pid to whoever started it
        os.write(1, f"{child}\n".encode())
        os._exit(0)
    os.dup2(2, 1)                                 # stdout: the log too
    listen_fd, where, k, idle = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]                           # the first notebook's folder is not everyone's
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if server.subreaper:
        zm._become_subreaper()
    since = time.time_ns()
    import importlib
    for name in server.imports:
        importlib.import_module(name)
    from labkit.runtime.local import stamps
    srv, told = server(listen_fd, where, k, idle), []
    srv.loaded()
    zm.freeze()                                   # (before the first fork; again after the preloads)
    srv.wake_r, srv.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(srv.wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: told.append("it was told to stop (SIGTERM)"))
    srv.sel.register(srv.wake_r, selectors.EVENT_READ)
    srv.watch = stamps.Watch(since)
    preloaded, quiet_since = os.environ.get("LABKIT_PRELOAD", "1") == "0", time.monotonic()
    while True:
        events = srv.sel.select(0.1 if not preloaded else 5.0)
        if events:
            quiet_since = time.monotonic()
        for key, _ in events:
            if key.fileobj == srv.wake_r:
                try:
                    os.read(srv.wake_r, 4096)
                except BlockingIOError:
                    pass
            elif key.fileobj is srv.listener:
                srv.accept()
            elif key.fileobj in srv.clients:
                srv.serve_safely(srv.clients[key.fileobj])
        if srv.reap() or events:
            srv.tidy()
        if not preloaded and time.monotonic() - quiet_since >= PRELOAD_AFTER:
            zm._preload()                         # (dynamo, DTensor, FSDP, the optimizers)
            srv.loaded()
            zm.freeze()
            preloaded = True
            srv.watch.close()                     # again, over what the preloads imported
            srv.watch = stamps.Watch(since)
        if srv.listener is not None and (told or srv.watch.changed()):
            srv.stop_listening(told[0] if told else f"{srv.watch.changed()} changed on disk")
        srv.exit_if_unused()


if __name__ == "__main__":
    main()
