"""TLS for ranks on other machines: a certificate made per cluster, the join file, and the TLS
control server that node agents connect to.

The control connection of a remote cluster carries code (pickled functions) to the ranks, so
when it can leave the machine it is TLS 1.2+ with a certificate made for this one cluster:
with the `openssl` tool where present (nearly every Linux), else with the `cryptography`
package (``pip install labkit[remote]``). Workers do not trust any CA: the join file carries
the cluster's certificate, and a server must present exactly that one (pinned).

The join file (JSON: the key, the certificate, the cluster's name) is the only secret a node
needs. It is written with mode 0600; a worker refuses one that other users may read or that
belongs to someone else. The key never appears on a command line or in an environment.
"""
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
from multiprocessing.connection import answer_challenge, deliver_challenge

from labkit.runtime import frames, protocol
from labkit.runtime.control import ControlServer


class JoinFileError(RuntimeError):
    """The join file cannot be used (readable by others, not ours, missing, malformed)."""


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


# -- the certificate ---------------------------------------------------------------------------
def make_certificate(folder: str, name: str) -> tuple:
    """A self-signed certificate for DNS name `name` and its private key, written into
    `folder` (the key with mode 0600). Returns (cert_path, key_path, how)."""
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    if shutil.which("openssl"):
        old = os.umask(0o077)
        try:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                            "-days", "30", "-subj", f"/CN={name}", "-addext",
                            f"subjectAltName=DNS:{name}", "-addext",
                            "basicConstraints=critical,CA:FALSE"],
                           check=True, capture_output=True, timeout=30)
        finally:
            os.umask(old)
        return cert, key, "openssl"
    try:
        return (*_with_cryptography(cert, key, name), "cryptography")
    except ImportError:
        raise RuntimeError("a remote cluster needs TLS, and TLS needs a certificate: install the "
                           "openssl tool or the cryptography package (pip install "
                           "'labkit[remote]')") from None


def _with_cryptography(cert_path: str, key_path: str, name: str) -> tuple:
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def server_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def client_context(cert_pem: str) -> ssl.SSLContext:
    """Trusts exactly the cluster's certificate (from the join file), no CA."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=cert_pem)
    return ctx


def check_pinned(sock: ssl.SSLSocket, cert_pem: str) -> None:
    """The server's certificate is byte for byte the one in the join file."""
    der = ssl.PEM_cert_to_DER_cert(cert_pem)
    if hashlib.sha256(sock.getpeercert(binary_form=True)).digest() != hashlib.sha256(der).digest():
        raise ssl.SSLError("the server's certificate is not this cluster's")


# -- the join file -----------------------------------------------------------------------------
def write_join_file(path: str, data: dict) -> str:
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return path


def read_join_file(path: str) -> dict:
    """The join file's contents, if only its owner (this user) can read it; else JoinFileError
    with what to do."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise JoinFileError(f"labkit cannot open the cluster's key file {path} ({exc.strerror}). "
                            "Copy it from the notebook's machine to the same path here "
                            "(scp -p keeps it private), or use the path the notebook printed.") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid():
            raise JoinFileError(f"labkit refuses the key file {path}: it belongs to another user "
                                f"(uid {st.st_uid}). Use your own copy.")
        if st.st_mode & 0o077:
            raise JoinFileError(f"labkit refuses the key file {path}: other users may read it "
                                f"(mode {st.st_mode & 0o777:04o}). Whoever has the key can run code "
                                f"in your ranks. Run: chmod 600 {path} and start again.")
        try:
            data = json.load(f)
            assert {"key", "cert", "name", "tls"} <= set(data)
        except (ValueError, AssertionError):
            raise JoinFileError(f"{path} is not a labkit key file (write it again from the "
                                "notebook: it prints the path).") from None
    return data


def private_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)        # mode 0700


# -- the server node agents connect to -----------------------------------------------------------
class TLSServer(ControlServer):
    """The control server (../control.py), with TLS and a node agent's hello (same defences:
    handshake deadline, a cap on pending handshakes, an accept loop that survives EMFILE)."""

    def __init__(self, on_agent, host: str, port: int, context):
        self.context = context
        super().__init__(on_agent, host=host, port=port)

    def _handshake(self, s: socket.socket) -> None:
        try:
            t = socket.socket(fileno=os.dup(s.fileno()))   # shutting `s` ends a stalled read
            frames.nodelay(t)                     # small control messages: no 40 ms waits
            t.settimeout(self.handshake_timeout)
            if self.context is not None:
                t = self.context.wrap_socket(t, server_side=True)
            ch = frames.Blocking(t)
            deliver_challenge(ch, self.authkey)
            answer_challenge(ch, self.authkey)
            hello = ch.recv()
            assert isinstance(hello, protocol.AgentHello)
        except Exception:                         # no TLS, wrong key, too slow, not an agent
            try:
                t.close()
            except Exception:
                pass
            self._done(s)
            return
        self._done(s)
        self._on_hello(t, hello.info)
