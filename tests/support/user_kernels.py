"""Jupyter kernels that run as other local users, as JupyterHub's local spawner starts them.

`UserKernel(user)` starts an IPython kernel (jupyter_client, the project's ipykernel) as `user`
through `sysusers.as_user`, with the Python every user can run (`sysusers.python_for_others`).
Its connection file (ports and HMAC key) is written by this process into a 0700 folder in the
user's home and handed to the user, so only root and that user can read it.

`execute_all(kernels, code)` sends one cell to every kernel at once and waits for all of them,
so that the cells run concurrently; each comes back as a `Reply` (status, stdout, stderr, error).
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import queue
import shutil
import tempfile
import time

from support.sysusers import as_user, ensure_user, python_for_others


@dataclasses.dataclass
class Reply:
    status: str = "?"
    stdout: str = ""
    stderr: str = ""
    error: str = ""

    def lines(self, tag: str) -> list:
        """Lines of stdout that start with `tag ` (without the tag)."""
        return [ln[len(tag) + 1:] for ln in self.stdout.splitlines() if ln.startswith(tag + " ")]


def _spec_dir(python: str) -> str:
    root = tempfile.mkdtemp(prefix="lkt-kernelspec-")
    spec = pathlib.Path(root, "kernels", "labkit-other")
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "labkit (another user)", "language": "python"}))
    return root


class UserKernel:
    def __init__(self, user: str, name: str, spec_root: str):
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager
        self.user = user
        self.uid, gid, self.home = ensure_user(user)
        self.conn_dir = pathlib.Path(self.home, ".lkt-kernels")
        self.conn_dir.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.conn_dir, self.uid, gid)
        ksm = KernelSpecManager(kernel_dirs=[str(pathlib.Path(spec_root, "kernels"))])
        self.km = KernelManager(kernel_name="labkit-other", kernel_spec_manager=ksm,
                                connection_file=str(self.conn_dir / f"{name}.json"))
        kw = as_user(user)
        kw["env"].pop("PYTHONPATH", None)              # the .pth of python_for_others finds labkit
        kw["env"].pop("JPY_PARENT_PID", None)
        cmd, kw = self.km.pre_start_kernel(**kw)       # writes the connection file (root's, 0600)
        os.chown(self.km.connection_file, self.uid, gid)
        self.km._launch_kernel(cmd, **kw)
        self.km.post_start_kernel(**kw)
        self.pid = self.km.provisioner.pid
        self.zmq_ports = {self.km.shell_port, self.km.iopub_port, self.km.stdin_port,
                          self.km.hb_port, self.km.control_port}
        self.kc = self.km.client()
        self.kc.start_channels()

    def wait_ready(self, timeout: float) -> None:
        self.kc.wait_for_ready(timeout=timeout)

    def request_shutdown(self) -> None:
        """Ask the kernel to exit (as JupyterHub's "shut down kernel"); `finish_shutdown` waits."""
        if self.km.has_kernel:
            self.km.request_shutdown()

    def finish_shutdown(self, keep_folder: bool = False) -> None:
        """Wait for the kernel to exit (killed after jupyter_client's grace period); the user's
        connection folder goes too unless `keep_folder` (other kernels of the user may start)."""
        try:
            self.kc.stop_channels()
        finally:
            if self.km.has_kernel:
                self.km.finish_shutdown()
            self.km.cleanup_resources()
            if not keep_folder:
                shutil.rmtree(self.conn_dir, ignore_errors=True)


PORT_RETRIES = 2      # a kernel that died before its first reply (a port taken meanwhile) is started again


def start_kernels(users: list, timeout: float = 120) -> list:
    """One kernel per entry of `users` (a user may appear several times), all started at once."""
    spec_root = _spec_dir(python_for_others(users[0]))
    kernels = []
    try:
        for i, user in enumerate(users):
            kernels.append(UserKernel(user, f"k{i}", spec_root))
        for i, user in enumerate(users):
            for attempt in range(PORT_RETRIES + 1):
                try:
                    kernels[i].wait_ready(timeout)
                    break
                except RuntimeError as exc:
                    # jupyter_client picks the kernel's five TCP ports, frees them and writes them
                    # to the connection file; the kernel binds them later. They come from below
                    # the ephemeral range (conftest.py: labkit.runtime.ports), where only a
                    # process asking for that very port can take one in between; if one does,
                    # the kernel exits with "Address already in use" before it replies and gets
                    # new ports here.
                    if "died" not in str(exc) or attempt == PORT_RETRIES:
                        raise
                    kernels[i].finish_shutdown(keep_folder=True)   # the user's other kernels' files
                    kernels[i] = UserKernel(user, f"k{i}-{attempt + 1}", spec_root)
    except BaseException:
        shutdown_all(kernels)
        raise
    finally:
        shutil.rmtree(spec_root, ignore_errors=True)
    return kernels


def shutdown_all(kernels: list) -> None:
    """Ask every kernel to exit at once, then wait for each."""
    for step in ("request_shutdown", "finish_shutdown"):
        for k in kernels:
            try:
                getattr(k, step)()
            except Exception as exc:                   # noqa: BLE001 - the others still go
                print(f"kernel of {k.user} (pid {k.pid}): {step} failed: {exc!r}")


def execute_all(kernels: list, code: str, timeout: float) -> list:
    """Send `code` to every kernel at once; wait until each is idle again. One Reply per kernel."""
    ids = [k.kc.execute(code) for k in kernels]
    replies = [Reply() for _ in kernels]
    done = [False] * len(kernels)
    deadline = time.monotonic() + timeout
    while not all(done):
        if time.monotonic() > deadline:
            late = [f"{k.user} (kernel pid {k.pid})" for k, d in zip(kernels, done) if not d]
            raise TimeoutError(f"no answer within {timeout} s from the kernels of {late}")
        for i, k in enumerate(kernels):
            if done[i]:
                continue
            try:
                msg = k.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != ids[i]:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                setattr(replies[i], content["name"],
                        getattr(replies[i], content["name"]) + content["text"])
            elif kind == "error":
                replies[i].error = "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                done[i] = True
    for i, k in enumerate(kernels):
        reply = k.kc.get_shell_msg(timeout=10)
        while reply["parent_header"].get("msg_id") != ids[i]:
            reply = k.kc.get_shell_msg(timeout=10)
        replies[i].status = reply["content"]["status"]
    return replies
