"""Re-check an acr-scanner evidence bundle with nothing but torch and transformers.

    python recheck.py --model PATH [--bundle DIR] [--dtype float32] [--device cpu]
                      [--expect MANIFEST_SHA256] [--signer KEY.pub]

First the bundle and the model, with hashlib alone: every file against manifest.json, manifest.json's
own sha256 against --expect (the figure published with the evidence), its signature against --signer
(an ssh-ed25519 public key: the `ssh-keygen -Y sign` format, checked here in pure Python), and every
model file against model.json; any difference is printed and nothing is generated (exit 1). Then, for
every row of evidence.jsonl: build the model's input from the prompt *string* as recipe.json says (the
fixed text around it, BOS), check that it gives the ids the scan recorded, generate greedily
len(target_ids) tokens and compare them with the span's ids. Prints each row's match and the smallest
logit margin of the generation (the generated token's logit minus the best other logit, and where), then
a total; exits 0 only when every row matches. It imports nothing of acr-scanner (it is copied as is into
every bundle).
"""

import argparse
import base64
import hashlib
import json
import re
import sys
from pathlib import Path

# Characters a terminal acts on (every C0 control, newline included, DEL, C1, bidi overrides): a doc_id of
# the bundle printed raw could retitle or clear the terminal, or forge a "MATCH ..." line with a newline.
# The same set as scanner/cli/output.py's UNSAFE.
UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class Refused(Exception):
    """A bundle or a --model this script cannot check: printed as one line, exit 2."""


def safe(value) -> str:
    return UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def escape_reason(root: Path, name: str, model_folder: bool = False) -> str | None:
    """Why root/name leaves root: an absolute path, '..', a symbolic link loop, or a link leading out
    (with `model_folder`, a link may also lead into the blobs of the hub cache holding the folder: a
    snapshot's files are links into ../../blobs). A deliberate copy of scanner/confine.py's rule: this
    script imports nothing of acr-scanner."""
    if not name or "\x00" in name or "\\" in name or name.startswith("/") or ".." in name.split("/"):
        return "is not a plain name inside the bundle"
    base = root.resolve()
    try:
        target = (root / name).resolve()
    except (OSError, RuntimeError):  # a link loop (RuntimeError on Python 3.11)
        return "is a symbolic link loop"
    blobs = base.parent.parent / "blobs" if model_folder and base.parent.name == "snapshots" else None
    if target == base or base in target.parents or (blobs is not None and blobs in target.parents):
        return None
    return f"is a symbolic link leading outside the {'model folder' if model_folder else 'bundle'}"


def bundle_text(folder: Path, name: str) -> str:
    reason = escape_reason(folder, name)
    if reason:
        raise Refused(f"{folder / name} {reason}; refused (the bundle is damaged or was altered)")
    if not (folder / name).is_file():
        raise Refused(f"{folder / name} is missing; get the whole bundle as published")
    return (folder / name).read_text(encoding="utf-8", errors="replace")


def bundle_json(folder: Path, name: str) -> dict:
    try:
        value = json.loads(bundle_text(folder, name))
    except json.JSONDecodeError as err:
        raise Refused(f"{folder / name} is not JSON ({err}); the bundle is damaged") from err
    if not isinstance(value, dict):
        raise Refused(f"{folder / name} is not a JSON object; the bundle is damaged")
    return value


def _ids(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    )


def evidence_row(line: str):
    """The row on one line of evidence.jsonl, or the reason it is none."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        return f"not JSON ({err.msg})"
    if not (
        isinstance(row, dict)
        and isinstance(row.get("prompt"), str)
        and _ids(row.get("target_ids"))
        and row["target_ids"]
        and (row.get("prompt_ids") is None or _ids(row["prompt_ids"]))
    ):
        return "no prompt string and target_ids (a list of token ids)"
    return row


def read_recipe(folder: Path) -> dict:
    recipe = bundle_json(folder, "recipe.json")
    texts, ids = ("prefix_text", "suffix_text"), ("bos_ids", "prefix_ids", "suffix_ids", "stop_ids")
    if not all(isinstance(recipe.get(k), str) for k in texts) or not all(_ids(recipe.get(k)) for k in ids):
        raise Refused(
            f"{folder / 'recipe.json'} does not hold {', '.join(texts)} (strings) and {', '.join(ids)} "
            "(lists of token ids); the bundle is damaged"
        )
    return recipe


def read_bundle(folder: Path) -> tuple[dict, list, dict]:
    """(recipe, each evidence line's row or the reason it is none, environment)."""
    recipe = read_recipe(folder)
    lines = bundle_text(folder, "evidence.jsonl").splitlines()
    environment = bundle_json(folder, "environment.json")
    return recipe, [evidence_row(line) for line in lines if line.strip()], environment


MANIFEST, SIGNATURE, NAMESPACE = "manifest.json", "manifest.json.sig", "acr-scanner-bundle"
CHUNK = 1 << 22


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def plain_file(folder: Path, name: str, model_folder: bool = False) -> Path | None:
    """folder/name when escape_reason lets it stay inside folder and it is a regular file; else None."""
    path = folder / name
    return None if escape_reason(folder, name, model_folder) or not path.is_file() else path


def bundle_problems(folder: Path, expect: str | None, signer: str | None) -> list[str]:
    """Every bundle file against manifest.json; the manifest's sha256 against `expect`; its signature."""
    manifest = plain_file(folder, MANIFEST)
    if manifest is None:
        return [f"{MANIFEST} is missing"]
    data = manifest.read_bytes()
    problems = []
    digest = hashlib.sha256(data).hexdigest()
    if expect is not None and digest != expect.strip().lower():
        problems.append(f"{MANIFEST} sha256 {digest} is not the expected {expect}: not the published bundle")
    if signer is not None:
        problems += signature_problems(folder, data, signer)
    try:
        index = json.loads(data)
    except ValueError:
        index = None
    files = index.get("files") if isinstance(index, dict) else None
    for name, entry in files.items() if isinstance(files, dict) else []:
        reason = escape_reason(folder, name)
        if reason:  # never hashed, never read: a manifest must not point this script at a file elsewhere
            raise Refused(f"{folder / name} {reason}; refused (the bundle is damaged or was altered)")
        path = plain_file(folder, name)
        if path is None:
            problems.append(f"{name!r}: listed in {MANIFEST} but not a file inside the bundle")
        elif not isinstance(entry, dict) or sha256_file(path) != entry.get("sha256"):
            problems.append(f"{name!r}: edited since the bundle was written (sha256 differs from {MANIFEST})")
    return problems if isinstance(files, dict) else problems + [f"{MANIFEST} lists no files"]


def model_problems(folder: Path, model: str) -> list[str]:
    """Every file model.json names (the scan's own record) against the model's files, by sha256. A record
    that names no weight file proves nothing of the model: a problem, never a match."""
    record = bundle_json(folder, "model.json")
    root = Path(model)
    files = record.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        return ["model.json does not list the model's files ({path, sha256} each); the bundle is damaged"]
    if not any(f.get("role") == "weight" for f in files):
        return [
            "model.json lists no weight file of the model, so nothing ties the evidence to a model; the "
            "bundle is damaged or was altered"
        ]
    problems = []
    for entry in files:
        name = str(entry.get("path"))
        reason = None if root.is_file() else escape_reason(root, name, model_folder=True)
        path = root if root.is_file() else root / name
        if reason:  # never hashed: a bundle must not make this script tell the digest of a file elsewhere
            problems.append(f"model file {name!r}: {reason}; refused")
        elif not path.is_file():
            problems.append(f"model file {name!r}: missing in {model}")
        elif sha256_file(path) != entry.get("sha256"):
            problems.append(
                f"model file {name!r}: other bytes than the scan's (sha256 differs from model.json)"
            )
    return problems


# Ed25519 signature verification (RFC 8032, section 5.1.7), pure Python: the check must not need a
# cryptography library. Points in extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, x*y = T/Z.
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def point_add(a: tuple, b: tuple) -> tuple:
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    e, h = (y1 + x1) * (y2 + x2) - (y1 - x1) * (y2 - x2), (y1 + x1) * (y2 + x2) + (y1 - x1) * (y2 - x2)
    f, g = 2 * z1 * z2 - 2 * t1 * t2 * D, 2 * z1 * z2 + 2 * t1 * t2 * D
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def point_mul(scalar: int, point: tuple) -> tuple:
    out = (0, 1, 1, 0)
    while scalar:
        if scalar & 1:
            out = point_add(out, point)
        point, scalar = point_add(point, point), scalar >> 1
    return out


def point_encode(point: tuple) -> bytes:
    x, y, z, _ = point
    inverse = pow(z, P - 2, P)
    x, y = x * inverse % P, y * inverse % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def point_decode(data: bytes) -> tuple | None:
    y = int.from_bytes(data, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P or (x == 0 and sign):
        return None
    x = P - x if x & 1 != sign else x
    return (x, y, 1, x * y % P)


BASE = point_decode(bytes.fromhex("58" + "66" * 31))


def ed25519_verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """RFC 8032: [S]B == R + [k]A, k = SHA-512(R || A || M) mod L."""
    if len(public) != 32 or len(signature) != 64:
        return False
    a, r, s = point_decode(public), point_decode(signature[:32]), int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % L
    left, right = point_mul(s, BASE), point_add(r, point_mul(k, a))
    return (left[0] * right[2] - right[0] * left[2]) % P == 0 and (
        left[1] * right[2] - right[1] * left[2]
    ) % P == 0


# The `ssh-keygen -Y sign` signature format (OpenSSH's PROTOCOL.sshsig), ssh-ed25519 keys only.
def ssh_strings(data: bytes, count: int) -> tuple[list[bytes], bytes]:
    """`count` SSH strings (uint32 length, bytes) off the front of data, and what follows."""
    out = []
    for _ in range(count):
        if len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            raise ValueError("cut short")
        size = int.from_bytes(data[:4], "big")
        out.append(data[4 : 4 + size])
        data = data[4 + size :]
    return out, data


def ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def signed_data(message: bytes, namespace: str = NAMESPACE) -> bytes:
    """What an SSHSIG signature signs: the preamble, namespace and SHA-512 of the message."""
    return (
        b"SSHSIG"
        + ssh_string(namespace.encode())
        + ssh_string(b"")
        + ssh_string(b"sha512")
        + ssh_string(hashlib.sha512(message).digest())
    )


def _key_of(words: list[str]) -> bytes | None:
    """The ed25519 key of one key line's words (None for a line of no ssh-ed25519 key, or one whose
    allowed_signers namespaces="..." option leaves this namespace out); ValueError for a damaged key."""
    if "ssh-ed25519" not in words[:-1]:
        return None
    index = words.index("ssh-ed25519")
    options = ",".join(words[1:index])  # allowed_signers: principals [options] keytype key
    if "cert-authority" in options:
        return None  # a certificate authority signs certificates, not this bundle: not a signer key
    if "namespaces=" in options and NAMESPACE not in options.split("namespaces=", 1)[1].split('"')[1].split(
        ","
    ):
        return None
    (kind, key), _ = ssh_strings(base64.b64decode(words[index + 1]), 2)
    if kind != b"ssh-ed25519" or len(key) != 32:
        raise ValueError("not an ssh-ed25519 public key")
    return key


def public_keys(text: str) -> list[bytes]:
    """The 32-byte keys of every line of an OpenSSH public key file ('ssh-ed25519 AAAA... comment') or of
    an allowed_signers file ('who [options] ssh-ed25519 AAAA...', one signer a line, # comments)."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("#"):
            continue
        try:
            key = _key_of(line.split())
        except (ValueError, IndexError) as err:  # binascii.Error is a ValueError
            raise ValueError(f"line {number}: {err}") from err
        keys += [key] if key else []
    if not keys:
        raise ValueError("no ssh-ed25519 public key line ('ssh-ed25519 AAAA... comment') in it")
    return keys


def public_key(text: str) -> bytes:
    """The first key of a public key file (public_keys)."""
    return public_keys(text)[0]


def sshsig_verify(armored: str, message: bytes, public, namespace: str = NAMESPACE) -> str | None:
    """None when `armored` is a valid SSHSIG signature of message, in namespace, by `public` (a 32-byte key,
    or a list of the keys allowed to sign), else why not."""
    allowed = [public] if isinstance(public, bytes) else list(public)
    lines = [line.strip() for line in armored.strip().splitlines()]
    if (
        len(lines) < 3
        or lines[0] != "-----BEGIN SSH SIGNATURE-----"
        or lines[-1] != "-----END SSH SIGNATURE-----"
    ):
        return "not an SSH signature (-----BEGIN SSH SIGNATURE-----)"
    blob = base64.b64decode("".join(lines[1:-1]))
    if blob[:6] != b"SSHSIG" or int.from_bytes(blob[6:10], "big") != 1:
        return "not an SSHSIG version 1 signature"
    (key, space, _, hashing, signature), _ = ssh_strings(blob[10:], 5)
    (_, signer), _ = ssh_strings(key, 2)
    (kind, raw), _ = ssh_strings(signature, 2)
    if signer not in allowed:
        return "signed by another key than --signer"
    if space.decode() != namespace or hashing != b"sha512" or kind != b"ssh-ed25519":
        return f"signed for namespace {space.decode()!r} with {hashing.decode()}/{kind.decode()}, not {namespace!r} sha512/ssh-ed25519"
    return (
        None
        if ed25519_verify(signer, signed_data(message, namespace), raw)
        else "the signature does not match"
    )


def signer_keys(signer: str) -> list[bytes]:
    """The keys of the --signer file (a KEY.pub or an allowed_signers file); Refused when it is none."""
    try:
        return public_keys(Path(signer).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        why = (
            "no such file"
            if isinstance(err, FileNotFoundError)
            else "a folder"
            if isinstance(err, IsADirectoryError)
            else f"not readable as a public key file ({err})"
        )
        raise Refused(
            f"--signer {signer}: {why}; pass the signer's public key file (KEY.pub, an 'ssh-ed25519 "
            "AAAA...' line) or an allowed_signers file"
        ) from err


def signature_problems(folder: Path, manifest: bytes, signer: str) -> list[str]:
    """manifest.json's signature (manifest.json.sig) checked against the --signer key file's keys."""
    keys = signer_keys(signer)
    sig = plain_file(folder, SIGNATURE)
    if sig is None:
        return [f"{SIGNATURE} is missing: the bundle is not signed"]
    try:
        why = sshsig_verify(sig.read_text(encoding="ascii"), manifest, keys)
    except (ValueError, UnicodeDecodeError) as err:  # binascii.Error is a ValueError
        why = f"unreadable ({err})"
    return [f"{SIGNATURE}: {why}; the manifest is not signed by {signer}"] if why else []


def load(model: str, dtype: str, device: str, trust_remote_code: bool):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, extra = (
        (str(Path(model).parent), {"gguf_file": Path(model).name}) if model.endswith(".gguf") else (model, {})
    )
    tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code, **extra)
    weights = AutoModelForCausalLM.from_pretrained(
        where, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code, **extra
    )
    return tokenizer, weights.to(device).eval()


def completeness(folder: Path) -> str:
    """Whether the scan was complete when the bundle was written, and what the rows were drawn from."""
    counts = bundle_json(folder, "denominators.json")
    run = counts.get("run") if isinstance(counts.get("run"), dict) else {}
    state = (
        "the scan was complete"
        if counts.get("complete")
        else (
            f"the scan was UNFINISHED when exported (phase {counts.get('phase')}, {counts.get('shards_done')} of "
            f"{counts.get('shards_total')} shards): the rows cover its finished part only"
        )
    )
    return (
        f"{state}; {counts.get('rows')} rows drawn from {run.get('documents')} documents, {run.get('spans')} "
        f"spans, {run.get('candidates')} candidates, {run.get('memorized')} memorized"
    )


def input_ids(tokenizer, recipe: dict, prompt: str) -> list[int]:
    text = recipe["prefix_text"] + prompt + recipe["suffix_text"]
    return list(recipe["bos_ids"]) + list(tokenizer(text, add_special_tokens=False).input_ids)


def generate(model, ids: list[int], new_tokens: int, stops: list[int]) -> tuple[list[int], list[float]]:
    """Greedy ids and, per generated token, its logit minus the best other logit at that step."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=new_tokens,
        repetition_penalty=1.0,
        eos_token_id=stops or None,
        pad_token_id=stops[0] if stops else 0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    inputs = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config)
    chosen = out.sequences[0, len(ids) :].tolist()
    margins = []
    for token, logits in zip(chosen, out.logits, strict=False):
        row = logits[0].float().clone()
        gold = row[token].item()
        row[token] = float("-inf")
        margins.append(gold - row.max().item())
    return chosen, margins


def check_row(tokenizer, model, recipe: dict, row: dict) -> tuple[bool, str]:
    """(reproduced, the line to print) for one evidence row."""
    target = list(row["target_ids"])
    ids = input_ids(tokenizer, recipe, row["prompt"])
    expected = row.get("prompt_ids")
    if expected is not None and ids != recipe["prefix_ids"] + list(expected) + recipe["suffix_ids"]:
        return False, "the prompt string does not type into the recorded ids (another tokenizer?)"
    if not ids:
        return False, "the input is empty (no prompt and no fixed tokens): nothing to generate from"
    chosen, margins = generate(model, ids, len(target), recipe["stop_ids"])
    matched = next(
        (i for i, (a, b) in enumerate(zip(chosen, target, strict=False)) if a != b),
        min(len(chosen), len(target)),
    )
    margins = margins[: len(target)]
    at = min(range(len(margins)), key=margins.__getitem__) if margins else None
    margin = f"margin {margins[at]:.4f} at token {at}" if at is not None else "no margin"
    recorded = row.get("generation_margin")
    scan = f" (scan: {recorded:.4f})" if isinstance(recorded, int | float) else ""
    return chosen[: len(target)] == target, f"{matched}/{len(target)} tokens, {margin}{scan}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Re-check an acr-scanner evidence bundle.")
    parser.add_argument("--model", required=True, help="The model folder (or .gguf file) the bundle names.")
    parser.add_argument(
        "--bundle", default=str(Path(__file__).resolve().parent), help="Default: this folder."
    )
    parser.add_argument("--dtype", default=None, help="Default: the dtype the scan verified in.")
    parser.add_argument("--device", default=None, help="Default: cuda when available, else cpu.")
    parser.add_argument(
        "--expect", default=None, help="The manifest.json sha256 published with the evidence."
    )
    parser.add_argument("--signer", default=None, help="The signer's ssh-ed25519 public key file (KEY.pub).")
    args = parser.parse_args(argv)
    folder = Path(args.bundle)
    try:
        if not Path(args.model).exists():  # never a hub download: the evidence names local files
            raise Refused(
                f"--model {args.model}: no such folder or file; pass the model's folder (or .gguf file)"
            )
        if args.signer is not None:
            signer_keys(args.signer)  # a wrong --signer is the user's to fix: said before any check runs
        problems = bundle_problems(folder, args.expect, args.signer) + model_problems(folder, args.model)
        if not problems:
            recipe, rows, environment = read_bundle(folder)
            summary = completeness(folder)
    except Refused as err:
        print(f"error: {safe(err)}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"PROBLEM {safe(problem)}")
    if problems:
        print(
            f"{len(problems)} problem(s): nothing generated (the evidence or the model is not the one published)"
        )
        return 1
    print(f"bundle and model files match {MANIFEST} and model.json; {summary}")
    if args.expect is None and args.signer is None:  # whoever edits the bundle can rewrite its manifest too
        print(
            f"WARNING {MANIFEST} was NOT checked against a published figure: pass --expect SHA256 (the digest "
            "published with the evidence) or --signer KEY.pub, or an edited bundle passes as intact"
        )
    import torch

    scan = environment.get("scan")
    dtype = args.dtype or (scan.get("dtype") if isinstance(scan, dict) else None) or "float32"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer, model = load(args.model, dtype, device, bool(recipe.get("trust_remote_code")))
    good = 0
    size = model.get_input_embeddings().num_embeddings
    if max((i for k in ("bos_ids", "prefix_ids", "suffix_ids") for i in recipe[k]), default=-1) >= size:
        print(
            f"error: recipe.json holds token ids outside the model's {size}; another model, or a damaged bundle",
            file=sys.stderr,
        )
        return 2
    for number, row in enumerate(rows, 1):
        if isinstance(row, dict):  # ids the model does not have would make generation fail, not mismatch
            row = row if max(row["target_ids"]) < size else f"a target id is outside the model's {size} ids"
        if isinstance(row, str):
            print(f"DAMAGED evidence row {number}: {row}; it cannot be re-checked")
            continue
        ok, line = check_row(tokenizer, model, recipe, row)
        good += ok
        print(f"{'MATCH' if ok else 'MISMATCH'} {safe(row.get('doc_id'))} {safe(row.get('span_id'))}: {line}")
    print(f"{good}/{len(rows)} rows reproduce ({safe(dtype)}, {safe(device)})")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
