"""`export --bundle DIR --sign KEY`: manifest.json signed with the user's ssh-ed25519 key, offline.

The signature is manifest.json.sig in the format of `ssh-keygen -Y sign -n acr-scanner-bundle` (OpenSSH's
PROTOCOL.sshsig; Ed25519 is deterministic, so it is byte for byte what ssh-keygen writes for the same key
and file), so anyone checks it with `ssh-keygen -Y verify`, with `acr-scan verify --bundle --signer`, or
with the bundle's own recheck.py, which verifies it in pure Python (no cryptography library). The key is
an unencrypted OpenSSH private key (`ssh-keygen -t ed25519`); an encrypted one is refused with the
ssh-keygen command that signs the manifest instead. The arithmetic is recheck.py's (one copy).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from scanner.errors import InputError, require
from scanner.results.recheck import (
    BASE,
    NAMESPACE,
    L,
    point_encode,
    point_mul,
    signed_data,
    ssh_string,
    ssh_strings,
)

BEGIN, END = "-----BEGIN OPENSSH PRIVATE KEY-----", "-----END OPENSSH PRIVATE KEY-----"


def _scalar(seed: bytes) -> int:
    """RFC 8032 section 5.1.5: the secret scalar of a 32-byte seed (pruned)."""
    return (int.from_bytes(hashlib.sha512(seed).digest()[:32], "little") & ((1 << 254) - 8)) | (1 << 254)


def ed25519_sign(seed: bytes, message: bytes) -> bytes:
    """RFC 8032 section 5.1.6: the 64-byte signature of message by the key of the 32-byte seed."""
    h, a = hashlib.sha512(seed).digest(), _scalar(seed)
    public = point_encode(point_mul(a, BASE))
    r = int.from_bytes(hashlib.sha512(h[32:] + message).digest(), "little") % L
    big_r = point_encode(point_mul(r, BASE))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % L
    return big_r + ((r + k * a) % L).to_bytes(32, "little")


def read_private_key(path: str) -> tuple[bytes, bytes]:
    """(seed, public key) of an unencrypted OpenSSH ssh-ed25519 private key file."""
    fix = f"--sign {path}: expected an unencrypted OpenSSH ed25519 private key (ssh-keygen -t ed25519 -N '')"
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{fix}; cannot read it ({err})") from err
    lines = [line.strip() for line in text.strip().splitlines()]
    require(len(lines) > 2 and lines[0] == BEGIN and lines[-1] == END, f"{fix}; it is not one")
    try:
        blob = base64.b64decode("".join(lines[1:-1]))
        require(blob.startswith(b"openssh-key-v1\0"), f"{fix}; it is not one")
        (cipher, _, _), rest = ssh_strings(blob[15:], 3)
        require(cipher == b"none", f"--sign {path}: the key is encrypted with a passphrase; sign with an "
                "unencrypted copy, or sign the manifest yourself: ssh-keygen -Y sign -f KEY -n "
                f"{NAMESPACE} BUNDLE/manifest.json (it writes BUNDLE/manifest.json.sig)")
        (_, private), _ = ssh_strings(rest[4:], 2)  # uint32 key count, the public key, the private block
        (kind, public, secret), _ = ssh_strings(private[8:], 3)  # after two uint32 check words
    except (ValueError, IndexError) as err:  # binascii.Error is a ValueError
        raise InputError(f"{fix}; it is damaged ({err})") from err
    require(kind == b"ssh-ed25519" and len(secret) == 64, f"{fix}; it holds a {kind.decode(errors='replace')} key")
    return secret[:32], public


def sign_manifest(manifest: bytes, key: str) -> bytes:
    """manifest.json.sig: the armored SSHSIG signature of the manifest's bytes."""
    seed, public = read_private_key(key)
    require(point_encode(point_mul(_scalar(seed), BASE)) == public,
            f"--sign {key}: its public half does not belong to its private key; the key file is damaged")
    key_blob = ssh_string(b"ssh-ed25519") + ssh_string(public)
    signature = ssh_string(b"ssh-ed25519") + ssh_string(ed25519_sign(seed, signed_data(manifest)))
    blob = (b"SSHSIG" + (1).to_bytes(4, "big") + ssh_string(key_blob) + ssh_string(NAMESPACE.encode())
            + ssh_string(b"") + ssh_string(b"sha512") + ssh_string(signature))
    text = base64.b64encode(blob).decode()
    body = "\n".join(text[i:i + 70] for i in range(0, len(text), 70))
    return f"-----BEGIN SSH SIGNATURE-----\n{body}\n-----END SSH SIGNATURE-----\n".encode()
