"""The deployment files stay true: cluster/ YAML has the shape the Ray launcher and KubeRay expect,
the Slurm script is valid bash, the Dockerfiles pin their versions and install the package, and
every `acr-scan` command line in cluster/, docker/ and README's code blocks names a real subcommand
and real options (with valid literal values) of `scanner.cli.main.cli`."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import click
import pytest
import yaml
from packaging.requirements import Requirement

from scanner.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "cluster" / "ray-cluster.yaml"
RAYJOB = ROOT / "cluster" / "rayjob.yaml"
SLURM = ROOT / "cluster" / "slurm.sbatch"
GPU_IMAGE = ROOT / "docker" / "Dockerfile.gpu"
CPU_IMAGE = ROOT / "docker" / "Dockerfile.cpu"
README = ROOT / "README.md"
DEPLOY_FILES = [LAUNCHER, RAYJOB, SLURM, GPU_IMAGE, CPU_IMAGE]

# `acr-scan` (or `python -m scanner`) as a command word: not part of acr-scanner, a path or a name.
CALL = re.compile(r"(?<![^\s\"'`(;&|/])(?:acr-scan|python3? -m scanner)(?!\S)")
CPU_RUN = re.compile(r"\bdocker run\b.*?(?<!\S)\S*acr-scanner:cpu(?!\S)(.*)")
GPU_INSTANCE = re.compile(r"^(g4dn|g5|g6|g6e|gr6|p3|p4d|p4de|p5|p5e|p5en|p6)\.")
SHELL_PUNCT = set("();<>|&`")  # a backtick also ends `inline code` in comments


@dataclass(frozen=True)
class Command:
    where: str
    args: tuple[str, ...]

    @property
    def subcommand(self) -> str | None:
        rest = list(self.args)
        while rest and rest[0].startswith("-"):
            rest.pop(0)
        return rest[0] if rest else None

    def value(self, option: str) -> str | None:
        for i, arg in enumerate(self.args):
            if arg == option and i + 1 < len(self.args):
                return self.args[i + 1]
            if arg.startswith(option + "="):
                return arg.split("=", 1)[1]
        return None


def shell_words(text: str) -> list[str]:
    """Words of one shell command line, up to the first operator (&&, |, ;, >, ...) or comment."""
    lex = shlex.shlex(text, posix=True, punctuation_chars="".join(SHELL_PUNCT))
    lex.whitespace_split = True
    try:
        words = list(lex)
    except ValueError:  # a command quoted inside a longer one, or prose: plain words are enough
        words = [word.strip("\"'") for word in text.split()]
    for i, word in enumerate(words):
        if set(word) <= SHELL_PUNCT:
            return words[:i]
    return words


def logical_lines(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Comment markers stripped (commands in comments are documentation), continuations joined."""
    out, buf, start = [], "", 0
    for number, line in lines:
        line = re.sub(r"^\s*#+\s?", "", line)
        if not buf:
            start = number
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def commands_in(
    text_lines: list[tuple[int, str]], name: str, default_cmd: tuple[str, ...] = ()
) -> list[Command]:
    found = []
    for number, line in logical_lines(text_lines):
        for match in CALL.finditer(line):
            found.append(Command(f"{name}:{number}", tuple(shell_words(line[match.end() :]))))
        run = CPU_RUN.search(line)
        if run:  # the CPU image's entrypoint is acr-scan: what follows the image are its arguments
            found.append(Command(f"{name}:{number}", tuple(shell_words(run.group(1))) or default_cmd))
    return found


def yaml_strings(node, path: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from yaml_strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from yaml_strings(value, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def yaml_commands(path: Path) -> list[Command]:
    text = path.read_text()
    comments = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("#")]
    found = commands_in(comments, path.name)
    for doc in yaml.safe_load_all(text):
        for key, value in yaml_strings(doc):
            lines = list(enumerate(value.splitlines(), 1))
            found += [Command(f"{path.name}:{key}", c.args) for c in commands_in(lines, path.name)]
    return found


def dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
        for line in joined.splitlines()
        if line.strip()
    ]


def image_default_command(path: Path) -> tuple[str, ...]:
    cmd = [json.loads(args) for op, args in dockerfile(path) if op == "CMD"]
    return tuple(cmd[-1]) if cmd else ()


def readme_code_lines() -> list[tuple[int, str]]:
    lines, inside = [], False
    for number, line in enumerate(README.read_text().splitlines(), 1):
        if line.startswith("```"):
            inside = not inside
        elif inside:
            lines.append((number, line))
    return lines


def all_commands() -> list[Command]:
    default = image_default_command(CPU_IMAGE)
    found = yaml_commands(LAUNCHER) + yaml_commands(RAYJOB)
    for path in (SLURM, GPU_IMAGE, CPU_IMAGE):
        found += commands_in(list(enumerate(path.read_text().splitlines(), 1)), path.name, default)
    entrypoint = [json.loads(a) for op, a in dockerfile(CPU_IMAGE) if op == "ENTRYPOINT"]
    if entrypoint and entrypoint[-1] == ["acr-scan"]:
        found.append(Command(f"{CPU_IMAGE.name}:ENTRYPOINT+CMD", default))
    return found + commands_in(readme_code_lines(), README.name, default)


def option_index(command: click.Command) -> dict[str, click.Option | None]:
    index: dict[str, click.Option | None] = {"-h": None, "--help": None}  # help_option_names of the group
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                index[name] = param
    return index


def lookup(token: str, index: dict) -> tuple[bool, click.Option | None]:
    if token in index:
        return True, index[token]
    repeated = re.fullmatch(r"-([A-Za-z])\1+", token)  # -vv
    if repeated and getattr(index.get(f"-{repeated.group(1)}"), "count", False):
        return True, index[f"-{repeated.group(1)}"]
    return False, None


def problems(args: tuple[str, ...]) -> list[str]:
    """What is wrong with `acr-scan ARGS`: unknown subcommand, unknown option, bad literal value."""
    rest, errors = list(args), []
    group = option_index(cli)
    while rest and rest[0].startswith("-"):
        token = rest.pop(0)
        if not lookup(token, group)[0]:
            errors.append(f"acr-scan has no option {token}; it has {sorted(group)}")
    if not rest:
        return errors
    name = rest.pop(0)
    command = cli.commands.get(name)
    if command is None:
        return errors + [f"no subcommand {name!r}; subcommands are {sorted(cli.commands)}"]
    options = option_index(command)
    while rest:
        token = rest.pop(0)
        if token == "--":
            break
        if not token.startswith("-") or re.fullmatch(r"-\d[\d.e-]*", token):
            continue
        key, has_value, value = token.partition("=")
        known, option = lookup(key, options)
        if not known:
            errors.append(f"`acr-scan {name}` has no option {key}; it has {sorted(options)}")
            continue
        if option is None or option.is_flag or option.count:
            continue
        if not has_value:
            if not rest:
                errors.append(f"{key} needs a value")
                continue
            value = rest.pop(0)
        if "$" not in value:  # shell variables are checked where they are set
            try:
                option.type.convert(value, option, None)
            except click.BadParameter as err:
                errors.append(f"{key} {value!r}: {err.message}")
    return errors


COMMANDS = all_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_acr_scan_command_line_uses_a_real_subcommand_and_real_options(command):
    assert not problems(command.args), f"{command.where}: acr-scan {shlex.join(command.args)}"


def test_the_option_check_rejects_misspelt_options_commands_and_values():
    assert problems(("scan", "c/", "--model", "m", "--out", "r/")) == []
    assert problems(("-vv", "scan", "c/", "--model=m", "--out", "r/", "--tau", "$TAU")) == []
    assert any("--modle" in p for p in problems(("scan", "c/", "--modle", "m", "--out", "r/")))
    assert any("'scna'" in p for p in problems(("scna", "c/")))
    assert any("'sometimes'" in p for p in problems(("scan", "c/", "--bos", "sometimes")))
    assert any("'many'" in p for p in problems(("scan", "c/", "--span-tokens", "many")))
    assert any("--verbos" in p for p in problems(("--verbos", "demo")))


def test_command_lines_are_found_in_every_deployment_file_and_the_readme():
    files = {c.where.split(":")[0] for c in COMMANDS}
    assert files >= {p.name for p in DEPLOY_FILES} | {README.name}
    assert {c.subcommand for c in COMMANDS} >= {"scan", "status", "demo", "acr", "export", "report"}


@pytest.mark.parametrize("path", [LAUNCHER, RAYJOB, SLURM], ids=lambda p: p.name)
def test_cluster_files_scan_with_the_ray_executor_on_the_cluster_they_run_in(path):
    scans = [
        c for c in COMMANDS if c.where.startswith(path.name) and c.subcommand == "scan" and c.value("--out")
    ]
    assert scans, f"{path.name} has no `acr-scan scan ... --out RUN_DIR` line"
    for scan in scans:
        assert scan.value("--executor") == "ray", scan
        assert scan.value("--ray-address") == "auto", scan
        out = scan.value("--out")
        assert out and not out.startswith(("/tmp", "~", ".")), f"{scan.where}: run dir must be shared: {out}"


@pytest.mark.parametrize("path", DEPLOY_FILES, ids=lambda p: p.name)
def test_deployment_files_start_with_comments_on_editing_and_submitting(path):
    text = path.read_text()
    head = re.match(r"(?:#[^\n]*\n)+", text.removeprefix("#!/bin/bash\n"))
    assert head, f"{path.name} must start with comments"
    assert "edit" in head.group(0).lower() and re.search(r"submit|build", head.group(0))


@pytest.mark.parametrize("path", [*DEPLOY_FILES, README], ids=lambda p: p.name)
def test_paths_named_in_deployment_docs_exist(path):
    for name in re.findall(r"(?<![\w/.-])((?:cluster|docker)/[\w.-]*\w)", path.read_text()):
        assert (ROOT / name).exists(), f"{path.name} names {name}, which does not exist"


# ---- KubeRay RayJob ----


def rayjob_docs():
    docs = [d for d in yaml.safe_load_all(RAYJOB.read_text()) if d]
    jobs = [d for d in docs if d.get("kind") == "RayJob"]
    assert len(jobs) == 1
    return jobs[0], docs


def entrypoint(job: dict) -> Command:
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[0] == "acr-scan", words
    return Command("entrypoint", tuple(words[1:]))


def pod_specs(cluster_spec: dict) -> list[dict]:
    return [cluster_spec["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster_spec["workerGroupSpecs"]
    ]


def test_rayjob_runs_the_scan_and_shuts_its_cluster_down():
    job, _ = rayjob_docs()
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert entrypoint(job).subcommand == "scan"
    assert isinstance(spec["backoffLimit"], int) and spec["backoffLimit"] >= 1
    assert str(spec["rayClusterSpec"]["rayVersion"]) == "2.60.0"


def test_rayjob_run_dir_is_on_a_shared_claim_mounted_in_head_and_every_worker():
    job, docs = rayjob_docs()
    out = entrypoint(job).value("--out")
    for pod in pod_specs(job["spec"]["rayClusterSpec"]):
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        }
        mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", []) if m["name"] in claims]
        assert any(out.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts), (out, mounts)
        for claim in claims.values():
            pvcs = [
                d for d in docs if d.get("kind") == "PersistentVolumeClaim" and d["metadata"]["name"] == claim
            ]
            assert all("ReadWriteMany" in p["spec"]["accessModes"] for p in pvcs)


def test_rayjob_workers_request_gpus_and_every_pod_runs_the_gpu_image():
    job, _ = rayjob_docs()
    cluster = job["spec"]["rayClusterSpec"]
    for group in cluster["workerGroupSpecs"]:
        limits = [c["resources"]["limits"] for c in group["template"]["spec"]["containers"]]
        assert any(int(limit.get("nvidia.com/gpu", 0)) >= 1 for limit in limits), group["groupName"]
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    images = {c["image"] for pod in pod_specs(cluster) for c in pod["containers"]}
    assert len(images) == 1 and images.pop().endswith("acr-scanner:gpu")


# ---- KubeRay manifests against the CRDs' own schemas (cluster/crd/README.md) ----

KUBERAY = "v1.7.0"
CRDS = {
    "RayJob": ROOT / "cluster" / "crd" / "ray.io_rayjobs.v1.json",
    "RayCluster": ROOT / "cluster" / "crd" / "ray.io_rayclusters.v1.json",
}


def closed(node):
    """The schema as `kubectl apply` enforces it with strict field validation: an object that lists
    its properties refuses others, unless it keeps unknown fields (x-kubernetes-preserve-unknown-fields)."""
    if isinstance(node, list):
        return [closed(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: closed(v) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_validator(kind: str):
    jsonschema = pytest.importorskip("jsonschema")
    # OpenAPI 3.0 schemas are JSON Schema draft 4 in the keywords CRDs may use.
    return jsonschema.Draft4Validator(closed(json.loads(CRDS[kind].read_text())))


def schema_errors(validator, doc) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
        for e in validator.iter_errors(doc)
    ]


def kuberay_docs() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "cluster").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and str(doc.get("apiVersion", "")).startswith("ray.io/"):
                found.append((path.name, doc))
    return found


def test_crd_schemas_are_the_vendored_kuberay_release():
    readme = (ROOT / "cluster" / "crd" / "README.md").read_text()
    assert f"release **{KUBERAY}**" in readme and "Apache License 2.0" in readme
    for path in CRDS.values():
        schema = json.loads(path.read_text())
        assert schema["properties"]["kind"]["type"] == "string" and "spec" in schema["properties"], path.name


def test_kuberay_manifests_validate_against_the_crd_schemas():
    docs = kuberay_docs()
    assert {doc["kind"] for _, doc in docs} >= {"RayJob"}
    for name, doc in docs:
        assert doc["apiVersion"] == "ray.io/v1", (
            f"{name}: {doc['apiVersion']}; the vendored CRDs are ray.io/v1"
        )
        assert doc["kind"] in CRDS, f"{name}: no vendored schema for {doc['kind']}"
        assert not schema_errors(crd_validator(doc["kind"]), doc), (
            name,
            schema_errors(crd_validator(doc["kind"]), doc),
        )
        if doc["kind"] == "RayJob":  # the cluster it creates is a RayCluster spec
            cluster = {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": "c"},
                "spec": doc["spec"]["rayClusterSpec"],
            }
            assert not schema_errors(crd_validator("RayCluster"), cluster), name


def test_kuberay_admission_rules_the_schema_does_not_hold():
    """What KubeRay's operator checks itself (ray-operator/controllers/ray/utils/validation.go)."""
    job, _ = rayjob_docs()
    name = job["metadata"]["name"]
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 53 - 6, "DNS-1035 label, <= 47"
    cluster = job["spec"]["rayClusterSpec"]
    for group in cluster["workerGroupSpecs"]:  # without autoscaling both bounds must be set
        assert "minReplicas" in group and "maxReplicas" in group, group["groupName"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        assert not (
            group.get("resources") and set(group["rayStartParams"]) & {"num-cpus", "num-gpus", "memory"}
        )
        assert "labels" not in group["rayStartParams"]


def test_the_crd_check_refuses_misspelt_fields_and_wrong_types():
    job, _ = rayjob_docs()
    validator = crd_validator("RayJob")
    assert schema_errors(validator, job) == []
    misspelt = json.loads(json.dumps(job))
    misspelt["spec"]["shutdownAfterJobFinish"] = misspelt["spec"].pop("shutdownAfterJobFinishes")
    assert any("shutdownAfterJobFinish" in e for e in schema_errors(validator, misspelt))
    wrong = json.loads(json.dumps(job))
    wrong["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert any("workerGroupSpecs.0.replicas" in e for e in schema_errors(validator, wrong))
    deep = json.loads(json.dumps(job))
    deep["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "imagePullPolicy"
    ] = 3
    deep["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    errors = schema_errors(validator, deep)
    assert any("imagePullPolicy" in e for e in errors) and any("volumeMount" in e for e in errors), errors


# ---- Ray cluster launcher ----


def test_launcher_has_a_cpu_head_gpu_workers_and_the_gpu_image():
    config = yaml.safe_load(LAUNCHER.read_text())
    assert config["docker"]["image"].endswith("acr-scanner:gpu")
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert not GPU_INSTANCE.match(head["node_config"]["InstanceType"])
    workers = {name: t for name, t in types.items() if name != config["head_node_type"]}
    gpu_workers = [t for t in workers.values() if GPU_INSTANCE.match(t["node_config"]["InstanceType"])]
    assert gpu_workers and len(gpu_workers) == len(workers)
    for worker in workers.values():
        assert 0 <= worker["min_workers"] <= worker["max_workers"] <= config["max_workers"]
    assert sum(w["min_workers"] for w in gpu_workers) >= 1, "no GPU at start: the scan would pick CPU actors"
    assert any("ray start --head" in c for c in config["head_start_ray_commands"])
    assert any("ray start --address=$RAY_HEAD_IP:6379" in c for c in config["worker_start_ray_commands"])


def test_launcher_mounts_the_shared_run_dir_into_the_container():
    config = yaml.safe_load(LAUNCHER.read_text())
    volumes = [o.split()[1].split(":") for o in config["docker"]["run_options"] if o.startswith("--volume")]
    assert ["/data", "/data"] in volumes
    assert any("/data" in c and "mount" in c for c in config["initialization_commands"])
    scans = [c for c in COMMANDS if c.where.startswith(LAUNCHER.name) and c.subcommand == "scan"]
    assert all(c.value("--out").startswith("/data/") for c in scans)


def test_launcher_validates_against_rays_own_schema():
    spec = find_spec("ray")
    jsonschema = pytest.importorskip("jsonschema")
    if spec is None or spec.origin is None:
        pytest.skip("ray is not installed")
    schema = Path(spec.origin).parent / "autoscaler" / "ray-schema.json"
    if not schema.exists():
        pytest.skip(f"this ray has no {schema.name}")
    jsonschema.validate(yaml.safe_load(LAUNCHER.read_text()), json.loads(schema.read_text()))


# ---- Slurm ----


def test_slurm_script_is_valid_bash_that_starts_ray_on_the_gpu_nodes():
    bash = shutil.which("bash")
    assert bash
    result = subprocess.run([bash, "-n", str(SLURM)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = SLURM.read_text()
    assert re.search(r"^#SBATCH --gpus-per-node=\S+$", text, re.M)
    assert re.search(r"^#SBATCH --nodes=\d+$", text, re.M)
    starts_ray = "ray symmetric-run" in text or (
        re.search(r"ray start --head\b", text) and re.search(r"ray start --address", text)
    )
    assert starts_ray
    run_dir = re.search(r"^RUN_DIR=\$\{RUN_DIR:-(\S+)\}$", text, re.M)
    assert run_dir and not run_dir.group(1).startswith("/tmp")


CHECK_SCRIPTS = [
    ROOT / "cluster" / "slurm-local.sh",
    ROOT / "cluster" / "check-slurm.sh",
    ROOT / "docker" / "check-image.sh",
]


@pytest.mark.parametrize("path", CHECK_SCRIPTS, ids=lambda p: p.name)
def test_the_scripts_that_run_the_deployment_files_are_valid_bash_and_say_how_to_run_them(path):
    """They run for real only by hand (docs/cluster.md); here they must at least parse."""
    result = subprocess.run([shutil.which("bash") or "bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    head = re.match(r"#!.*\n((?:#[^\n]*\n)+)", path.read_text())
    assert head and f"bash {path.parent.name}/{path.name}" in head.group(1), f"{path.name}: say how to run it"


# ---- Dockerfiles ----

PIP_OPTIONS_WITH_VALUE = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
}
PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9_,.-]+\])?==[0-9][0-9A-Za-z.*+!]*")


def pip_installs(path: Path) -> list[list[str]]:
    """The arguments of every `pip install` in the RUN instructions."""
    found = []
    for op, args in dockerfile(path):
        if op != "RUN":
            continue
        lex = shlex.shlex(args, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words, segment = list(lex), []
        for word in [*words, ";"]:
            if set(word) <= SHELL_PUNCT:
                for i in range(len(segment) - 1):
                    if segment[i].rsplit("/", 1)[-1] in ("pip", "pip3") and segment[i + 1] == "install":
                        found.append(segment[i + 2 :])
                segment = []
            else:
                segment.append(word)
    return found


def requirements(path: Path) -> tuple[dict[str, str], list[str]]:
    """Pinned requirements {name: version} and local paths installed; asserts nothing is unpinned."""
    pins, paths = {}, []
    for args in pip_installs(path):
        skip = False
        for arg in args:
            if skip or arg.startswith("-"):
                skip = not skip and arg in PIP_OPTIONS_WITH_VALUE
                continue
            if arg.startswith(("/", ".")):
                paths.append(arg)
                continue
            assert PIN.fullmatch(arg), f"{path.name}: unpinned `pip install {arg}`"
            req = Requirement(arg)
            version = str(req.specifier).removeprefix("==")
            assert pins.setdefault(req.name.lower(), version) == version, (
                f"{path.name}: {req.name} pinned twice"
            )
    return pins, paths


def base_images(path: Path) -> list[str]:
    """FROM images, with the defaults of the ARGs declared before the first FROM (a build may override them)."""
    instructions, defaults = dockerfile(path), {}
    for op, args in instructions:
        if op == "FROM":
            break
        if op == "ARG" and "=" in args:
            defaults.update([args.split("=", 1)])
    resolve = lambda image: re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), image)  # noqa: E731
    return [resolve(args.split()[0]) for op, args in instructions if op == "FROM"]


@pytest.mark.parametrize("path", [GPU_IMAGE, CPU_IMAGE], ids=lambda p: p.name)
def test_dockerfiles_pin_base_images_and_install_the_package(path):
    for image in base_images(path):
        name, _, tag = image.rpartition(":")
        assert name and "/" not in tag and "$" not in image, f"{path.name}: FROM {image} has no fixed tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{path.name}: FROM {image} is not pinned"
    pins, paths = requirements(path)
    copied = [args.split()[-1] for op, args in dockerfile(path) if op == "COPY" and args.split()[-2] == "."]
    assert copied, f"{path.name} does not copy the repository"
    assert any(p.split("[")[0].rstrip("/") == copied[0].rstrip("/") for p in paths), "package not installed"
    assert pins.get("ray") == "2.60.0"


def pyproject_spec(name: str, extra: str | None = None):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return next(Requirement(r).specifier for r in reqs if Requirement(r).name == name)


def test_gpu_image_is_ray_on_cuda_with_torch_2_14_and_vllm_0_33():
    assert re.fullmatch(r"rayproject/ray:2\.60\.0-py311-cu1\d\d", base_images(GPU_IMAGE)[0])
    pins, paths = requirements(GPU_IMAGE)
    assert pins["torch"] == "2.14.0" and re.fullmatch(r"0\.33(\.\d+|\.\*)", pins["vllm"])
    assert any(p.endswith("[gpu]") for p in paths), "the gpu extra (vLLM) is not installed"
    assert pyproject_spec("torch").contains(pins["torch"])
    assert pyproject_spec("vllm", "gpu").contains(pins["vllm"].replace("*", "0"))


def test_cpu_image_is_python_3_11_with_cpu_torch_and_acr_scan_demo_by_default():
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", base_images(CPU_IMAGE)[0])
    pins, _ = requirements(CPU_IMAGE)
    # the CPU build by its local label: PyPI's torch==2.13.0 for Linux is the CUDA build (GBs of nvidia-*)
    assert pins["torch"] == "2.13.0+cpu" and pyproject_spec("torch").contains("2.13.0+cpu")
    entrypoint = [json.loads(a) for op, a in dockerfile(CPU_IMAGE) if op == "ENTRYPOINT"]
    assert entrypoint == [["acr-scan"]] and image_default_command(CPU_IMAGE) == ("demo",)


# ---- README and the cluster guide ----


def test_the_cluster_guide_is_linked_from_the_readme_and_names_every_way_to_submit():
    assert "(docs/cluster.md)" in README.read_text()
    section = (ROOT / "docs" / "cluster.md").read_text()
    for needle in (
        "--executor ray",
        "--ray-address",
        "--num-actors",
        "--gpus-per-actor",
        "--max-retries",
        "ray job submit --address",
        "ray up cluster/ray-cluster.yaml",
        "kubectl apply -f cluster/rayjob.yaml",
        "sbatch cluster/slurm.sbatch",
        "docker build -f docker/Dockerfile.gpu -t acr-scanner:gpu .",
        "docker build -f docker/Dockerfile.cpu -t acr-scanner:cpu .",
        "docker run --rm acr-scanner:cpu demo",
        "docker run --rm --gpus all",
    ):
        assert needle in section, needle
