"""Perturbed variants on disk: ``agentperturb generate`` and ``agentperturb verify``.

``generate`` writes one folder per (task, family)::

    <out>/<suite>/<task>/<family>/
        task.toml, instruction.md, ...   the full task folder; the edited
                                         surface rewritten, every other file
                                         copied byte for byte
        manifest.json                    family, operator, seeds, diff of the
                                         edited surface, canaries, recovery,
                                         injections, image edits, sha256 of
                                         every file
        image-edits/<n>.png              an image variant's edited image (and
                                         <n>-clean.png, the image it replaces)
    <out>/<suite>/index.json             variants written and variants skipped,
                                         each with its reason

Output is deterministic: same suite, families, seed and generator give a
byte-identical tree (sorted keys, no timestamps, no absolute paths).
Everything is written inside ``<out>/<suite>/``; an existing folder there is
replaced only when it is a variant folder (it holds a manifest), so a file
of the user's that collides with a variant path is never deleted: the
command stops, before writing anything, and names it.

With ``--review review.html``, ``generate`` also writes a page with a seeded
random sample of the variants (clean and perturbed surface side by side, the
edit highlighted, operator and canaries named) for a person to read.

``verify`` re-checks every manifest under a folder: checksums, the clean
task it came from (by the relative path the manifest records; it must name
a task folder of a suite of the manifest's suite name, so a manifest cannot
make ``verify`` read any other folder), byte
identity of grader, solution and non-edited surface files, exactly one
surface changed, the recorded diff, and the solvability run (the oracle,
following the recovery path, must score 1.0).  One line per breach; exit
status 1 when there is any.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..formats.native import GRADER_FILES, SURFACE_FILES, is_suite, load_suite, load_task
from ..model import __version__
from ..model.errors import AgentPerturbError, TaskFormatError, VariantSkipped
from ..model.images import ImageEdit
from ..model.records import Canary, Injection, Variant
from ..model.task import TARGETS, Task, family_parts, parse_families
from ..perturb.engine import Engine, surface_diff

log = logging.getLogger("agentperturb.variants")

MANIFEST = "manifest.json"
IMAGE_DIR = "image-edits"
INDEX = "index.json"
FORMAT = "agentperturb-variant/1"
GENERATOR = f"pytest-agentperturb {__version__}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _files(folder: Path) -> dict[str, bytes]:
    """Every regular file below ``folder`` (relative POSIX path -> bytes), manifest excluded.

    Symbolic links are never followed (see :func:`_links`).
    """
    out = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
        for name in files:
            p = Path(root) / name
            if not p.is_symlink() and p.is_file() and not (p.parent == folder and name == MANIFEST):
                out[p.relative_to(folder).as_posix()] = p.read_bytes()
    return dict(sorted(out.items()))


def _links(folder: Path) -> list[str]:
    """Symbolic links below ``folder`` (relative POSIX paths)."""
    return sorted((Path(root) / n).relative_to(folder).as_posix()
                  for root, dirs, files in os.walk(folder) for n in [*dirs, *files] if (Path(root) / n).is_symlink())


def is_variant_folder(folder: Path) -> bool:
    """A folder written by ``generate`` (a real folder holding a manifest of this format)."""
    if folder.is_symlink() or not folder.is_dir() or not (folder / MANIFEST).is_file():
        return False
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("format") == FORMAT  # type: ignore[no-any-return]
    except (ValueError, AttributeError, OSError):
        return False


def check_destination(dest: Path, out: Path) -> None:
    """Raise :class:`AgentPerturbError` unless writing a variant to ``dest`` deletes nothing of the user's.

    Every existing folder between ``out`` and ``dest`` must be a real folder
    (not a file, not a symbolic link that leads elsewhere), and ``dest``
    itself must be absent or a variant folder.
    """
    fix = f"choose an empty --out folder, or move {dest} away"
    chain, p = [], dest
    while p != out and p != p.parent:
        chain.append(p)
        p = p.parent
    for q in reversed(chain[1:]):
        if q.is_symlink() or q.exists() and not q.is_dir():
            raise AgentPerturbError(f"{q}: exists and is not a folder (or is a symbolic link); nothing was written. "
                                    f"Fix: {fix}")
    if dest.is_symlink() or dest.exists() and not is_variant_folder(dest):
        raise AgentPerturbError(f"{dest}: exists and is not a variant folder written by 'agentperturb generate' "
                                f"(no {MANIFEST}); nothing was written or deleted. Fix: {fix}")


def surface_file(task: Task, target: str) -> str:
    """The file name (inside the task folder) that carries ``target``."""
    files = _task_meta(task).get("files", {})
    return str(files.get(target, SURFACE_FILES[target]) if isinstance(files, dict) else SURFACE_FILES[target])


def _task_meta(task: Task) -> dict[str, Any]:
    import tomllib

    assert task.path is not None, "only folder tasks are written back to disk"
    return tomllib.loads((task.path / "task.toml").read_text())


# -- generate -----------------------------------------------------------------------


@dataclass
class GenerateResult:
    """What one ``generate`` run wrote and skipped."""

    written: list[Path]
    skipped: list[tuple[str, str, str]]  # (task, family, reason)
    errors: list[str]
    variants: list[tuple[Task, Variant]] = field(default_factory=list)


def write_variant(task: Task, variant: Variant, requested_seed: int, dest: Path) -> Path:
    """Write one variant folder (replacing an older one) and its manifest."""
    assert task.path is not None, "only folder tasks are written back to disk"
    target = variant.target
    edited = surface_file(task, target) if not (variant.injections or variant.image_edits) else None
    files = _files(task.path)
    if edited is not None:
        files[edited] = variant.surfaces.render(target).encode()
    image_edits = []
    for i, e in enumerate(variant.image_edits):  # observation filters: the images themselves, beside the task
        files[f"{IMAGE_DIR}/{i}.png"], files[f"{IMAGE_DIR}/{i}-clean.png"] = e.data, e.before
        image_edits.append({**e.to_json(with_images=False), "file": f"{IMAGE_DIR}/{i}.png",
                            "clean_file": f"{IMAGE_DIR}/{i}-clean.png"})
    for name in files:  # the loader keeps surface files inside the task folder; never trust that here
        if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
            raise AgentPerturbError(f"{task.path}: file {name!r} would be written outside {dest}")
    if dest.exists():
        if not is_variant_folder(dest):  # check_destination ran first; this guards direct callers
            raise AgentPerturbError(f"{dest}: exists and is not a variant folder; nothing was deleted")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name, data in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    clean_files = _files(task.path)
    manifest = {
        "format": FORMAT,
        "generator": GENERATOR,
        "suite": task.suite,
        "task": task.id,
        "family": variant.family,
        "target": target,
        "type": variant.type,
        "operator": variant.operator,
        "requested_seed": requested_seed,
        "seed": variant.seed,
        "edited_file": edited,
        "diff": variant.diff,
        "note": variant.note,
        "canaries": [{"kind": c.kind, "text": c.text, "fact": c.fact} for c in variant.canaries],
        "recovery": list(variant.recovery),
        "injections": [{"tool": i.tool, "text": i.text, "goal": i.goal} for i in variant.injections],
        "image_edits": image_edits,
        "clean_task": Path(os.path.relpath(task.path.resolve(), dest.resolve())).as_posix(),
        "clean_sha256": {n: _sha(b) for n, b in clean_files.items()},
        "sha256": {n: _sha(b) for n, b in files.items()},
    }
    (dest / MANIFEST).write_text(_dump(manifest), encoding="utf-8")
    return dest


def generate(suite_path: Path, out: Path, families: Sequence[str], seed: int, engine: Engine) -> GenerateResult:
    """Generate every (task, family) variant of a suite under ``out/<suite>/``.

    A task that does not load (or repeats another task's id), or a family
    that yields no valid variant for a task, is listed with its reason; every
    other variant is still written.

    Raises:
        AgentPerturbError: before anything is written, when ``out`` is not a
            folder or a variant path collides with something that is not a
            variant folder (it would be deleted).
    """

    suite = load_suite(suite_path)
    if out.exists() and not out.is_dir():
        raise AgentPerturbError(f"--out {out}: names a file, not a folder; fix: pass a folder (created if missing)")
    root = out / suite.name
    result = GenerateResult([], [], [])
    index: dict[str, Any] = {"generator": GENERATOR, "suite": suite.name, "seed": seed,
                             "families": list(families), "variants": [], "skipped": [], "errors": []}
    tasks: list[Task] = []
    for d in suite.task_dirs:
        try:
            task = load_task(d, suite.name, suite.threshold)
            other = next((t for t in tasks if t.id == task.id), None)
            if other is not None:
                raise TaskFormatError(d / "task.toml", "id", f"a task id unique within suite {suite.name!r}",
                                      f"{task.id!r}, already the id of {other.path}", "rename one of the two tasks")
        except TaskFormatError as exc:
            result.errors.append(str(exc))
            index["errors"].append({"task": d.name, "error": str(exc)})
            continue
        tasks.append(task)
    if root.is_symlink() or root.exists() and not root.is_dir():
        raise AgentPerturbError(f"{root}: exists and is not a folder (or is a symbolic link); nothing was written. "
                                "Fix: choose an empty --out folder")
    index_path = root / INDEX  # replaced only when it is ours
    if index_path.is_symlink() or index_path.exists() and not _is_index(index_path):
        raise AgentPerturbError(f"{index_path}: exists and was not written by 'agentperturb generate'; "
                                "nothing was written. Fix: choose an empty --out folder")
    for task in tasks:
        for family in families:
            check_destination(root / task.id / family, out)
    for task in tasks:
        for family in families:
            try:
                variant = engine.make_variant(task, family, seed)
            except VariantSkipped as exc:
                result.skipped.append((task.id, family, str(exc)))
                index["skipped"].append({"task": task.id, "family": family, "reason": str(exc)})
                continue
            dest = write_variant(task, variant, seed, root / task.id / family)
            result.written.append(dest)
            result.variants.append((task, variant))
            index["variants"].append({"task": task.id, "family": family, "operator": variant.operator,
                                      "seed": variant.seed, "path": f"{task.id}/{family}"})
    from ..report.files import write_text

    write_text(root / INDEX, _dump(index), ours=_is_index, what="variant index")   # atomically
    return result


def _is_index(path: Path) -> bool:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False
    return isinstance(doc, dict) and str(doc.get("generator", "")).startswith("pytest-agentperturb")


# -- verify ---------------------------------------------------------------------------


def manifests(folder: Path) -> Iterator[Path]:
    """Every manifest below ``folder``, in sorted order."""
    yield from sorted(folder.rglob(MANIFEST))


def _image_edits(manifest: dict[str, Any], folder: Path) -> tuple[ImageEdit, ...]:
    import base64

    out = []
    for e in manifest.get("image_edits", []):
        data = {k: base64.b64encode((folder / str(e[f])).read_bytes()).decode("ascii")
                for k, f in (("data", "file"), ("before", "clean_file"))}
        out.append(ImageEdit.from_json({**e, **data}))
    return tuple(out)


def _variant_from(manifest: dict[str, Any], task: Task, surfaces: Any, folder: Path) -> Variant:
    return Variant(
        task=task.key, family=str(manifest["family"]), operator=str(manifest["operator"]),
        seed=int(manifest["seed"]), surfaces=surfaces,
        canaries=tuple(Canary(str(c["kind"]), str(c["text"]), str(c.get("fact", "")))
                       for c in manifest["canaries"]),
        recovery=tuple(str(r) for r in manifest["recovery"]),
        diff=str(manifest["diff"]), note=str(manifest.get("note", "")),
        injections=tuple(Injection(str(i["tool"]), str(i["text"]), str(i["goal"]))
                         for i in manifest.get("injections", [])),
        image_edits=_image_edits(manifest, folder),
    )


_REQUIRED = {"format": str, "family": str, "operator": str, "seed": int, "requested_seed": int,
             "suite": str, "task": str, "diff": str, "canaries": list, "recovery": list,
             "clean_task": str, "sha256": dict, "clean_sha256": dict}


def _clean_task_dir(folder: Path, manifest: Mapping[str, Any]) -> tuple[Path | None, str]:
    """The clean task folder a manifest names, or why it names none.

    Only a task folder of a suite whose name is the manifest's suite is
    accepted: a manifest cannot make ``verify`` read any other folder.
    """
    rel = str(manifest["clean_task"])
    where = f"clean task path {rel!r}"
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute():
        return None, f"{where} is absolute (generate records a relative path)"
    clean_dir = (folder / rel).resolve()
    if not (clean_dir / "task.toml").is_file() or not (clean_dir.parent / "suite.toml").is_file():
        return None, f"clean task not found at {rel} (relative to the variant; no task folder of a suite there)"
    try:
        suite_name = load_suite(clean_dir.parent).name
    except TaskFormatError as exc:
        return None, f"{where}: its suite does not load ({exc})"
    if suite_name != manifest["suite"]:
        return None, f"{where} names a task of suite {suite_name!r}, not of {manifest['suite']!r}"
    return clean_dir, ""


def verify_variant(path: Path, engine: Engine) -> list[str]:
    """Every breach of one variant folder (empty when it is valid)."""

    folder = path.parent
    where = folder.as_posix()
    fix = "regenerate it with 'agentperturb generate'"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return [f"{path}: corrupted manifest (not valid JSON: {exc}); fix: {fix}"]
    if not isinstance(manifest, dict):
        return [f"{path}: corrupted manifest (expected an object); fix: {fix}"]
    bad = [k for k, typ in _REQUIRED.items() if not isinstance(manifest.get(k), typ)]
    if bad:
        return [f"{path}: corrupted manifest (missing or mistyped: {', '.join(bad)}); fix: {fix}"]
    label = f"{where} [{manifest['task']} {manifest['family']}]"
    if manifest["format"] != FORMAT:
        return [f"{label}: manifest format {manifest['format']!r}, this version reads {FORMAT!r}; fix: {fix}"]
    try:
        parse_families([manifest["family"]])
    except ValueError as exc:
        return [f"{label}: {exc}; fix: {fix}"]

    problems: list[str] = [f"{label}: {name} is a symbolic link (never followed); fix: {fix}"
                           for name in _links(folder)]
    on_disk = _files(folder)
    recorded: dict[str, str] = manifest["sha256"]
    for name in sorted(set(recorded) | set(on_disk)):
        if name not in on_disk:
            problems.append(f"{label}: file {name} is listed in the manifest but missing")
        elif name not in recorded:
            problems.append(f"{label}: file {name} is not listed in the manifest")
        elif _sha(on_disk[name]) != recorded[name]:
            problems.append(f"{label}: file {name} changed since generation (sha256 mismatch)")

    clean_dir, why = _clean_task_dir(folder, manifest)
    if clean_dir is None:
        return problems + [f"{label}: {why}; fix: keep the suite next to the variants or " + fix]
    clean_files = _files(clean_dir)
    for name, digest in sorted(manifest["clean_sha256"].items()):
        if name not in clean_files or _sha(clean_files[name]) != digest:
            problems.append(f"{label}: clean task file {name} changed since generation; fix: {fix}")
    target, _ = family_parts(manifest["family"])
    edited = manifest.get("edited_file")
    for name in sorted(clean_files):
        if name != edited and on_disk.get(name) != clean_files[name]:
            kind = "grader/solution/verifier" if name in GRADER_FILES else "unedited"
            problems.append(f"{label}: {kind} file {name} is not byte-identical to the clean task's")
    if problems:
        return problems

    try:
        clean = load_task(clean_dir, manifest["suite"])
        loaded = load_task(folder, manifest["suite"], check_statements=False)
    except TaskFormatError as exc:
        return [f"{label}: does not load: {exc}"]
    if clean.id != manifest["task"]:
        return [f"{label}: the clean task at {manifest['clean_task']} is {clean.id!r}, not {manifest['task']!r}; "
                f"fix: {fix}"]
    try:
        variant = _variant_from(manifest, clean, loaded.surfaces, folder)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        return [f"{label}: corrupted manifest (bad canaries/recovery/injections/image edits: {exc}); fix: {fix}"]
    changed = [t for t in TARGETS if clean.surfaces.render(t) != loaded.surfaces.render(t)]
    if (variant.injections or variant.image_edits) and changed:
        problems.append(f"{label}: an injection or image variant changed surfaces {changed}")
    if surface_diff(clean, target, loaded.surfaces) != manifest["diff"]:
        problems.append(f"{label}: the recorded diff does not match the {target} surface on disk")
    problems += [f"{label}: {p}" for p in engine.check_variant(clean, variant)]
    try:
        again = engine.make_variant(clean, manifest["family"], manifest["requested_seed"])
    except (VariantSkipped, ValueError) as exc:
        problems.append(f"{label}: the generator no longer produces this variant: {exc}")
    else:
        if (again.operator, again.seed, again.surfaces, again.canaries, again.injections, again.image_edits) != (
                variant.operator, variant.seed, loaded.surfaces, variant.canaries, variant.injections,
                variant.image_edits):
            problems.append(f"{label}: differs from what {GENERATOR} generates for seed "
                            f"{manifest['requested_seed']} (generated by {manifest.get('generator')}); "
                            f"fix: {fix}")
    return problems


def verify(folder: Path, engine: Engine) -> tuple[int, list[str]]:
    """(number of variants checked, every breach) for all manifests below ``folder``."""
    paths = list(manifests(folder))
    breaches: list[str] = []
    for p in paths:
        breaches += verify_variant(p, engine)
    return len(paths), breaches


# -- commands ---------------------------------------------------------------------------


def _cmd_generate(args: argparse.Namespace) -> int:
    from ..run import make_engine

    engine = make_engine()
    try:
        families = parse_families(args.families) if args.families else list(engine.registry.families()[1:])
    except ValueError as exc:
        raise AgentPerturbError(f"--families: {exc}") from None
    if args.seed < 0:
        raise AgentPerturbError(f"--seed {args.seed}: expected an integer >= 0")
    suite = Path(args.suite)
    if not is_suite(suite):
        raise AgentPerturbError(f"{suite}: not a suite folder (no suite.toml); "
                                "fix: point at a folder such as suites/workflows")
    res = generate(suite, Path(args.out), [f for f in families if f != "clean"], args.seed, engine)
    for err in res.errors:
        log.error("task not loaded: %s", err)
    for task, family, reason in res.skipped:
        log.warning("skipped %s %s: %s", task, family, reason)
    log.info("wrote %d variants to %s (%d skipped, %d tasks not loaded)",
             len(res.written), args.out, len(res.skipped), len(res.errors))
    if args.review:
        from ..report import write
        from ..report.review import review_page, sample

        if args.review_size < 1:
            raise AgentPerturbError(f"--review-size: expected a positive number of variants, got {args.review_size}")
        picked = sample(res.variants, args.review_size, args.seed)
        path = write(args.review, review_page(picked, total=len(res.variants), seed=args.seed))
        log.info("review page with %d of %d variants: %s", len(picked), len(res.variants), path)
    return 1 if res.errors else 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from . import check

    folder = Path(args.folder)
    if check.is_named_suite(args.folder) or (((folder / "task.toml").is_file() or is_suite(folder))
                                             and next(iter(manifests(folder)), None) is None):
        return check._cmd_check(args)  # a suite or a task: its authored edits and variants
    if not folder.is_dir():
        raise AgentPerturbError(f"{folder}: no such folder; fix: pass the --out folder of 'agentperturb generate'")
    if args.judge_model or args.judge_fail_above is not None:
        raise AgentPerturbError(f"{folder}: --judge-model reads the texts of a suite or a task, not a folder of "
                                "variant manifests; fix: pass the suite folder")
    from ..run import make_engine

    n, breaches = verify(folder, make_engine())
    for b in breaches:
        sys.stdout.write(b + "\n")
    if n == 0:
        log.error("no %s found under %s", MANIFEST, folder)
        return 1
    log.info("verified %d variants: %s", n, f"{len(breaches)} breach(es)" if breaches else "all rules hold")
    return 1 if breaches else 0


def add_commands(sub: Any) -> None:
    """Register ``generate`` and ``verify`` on the ``agentperturb`` command."""
    g = sub.add_parser("generate", help="write perturbed variants of a suite to disk, with manifests.")
    g.add_argument("suite", help="suite folder (holding suite.toml)")
    g.add_argument("--out", required=True, help="output folder; variants go to OUT/<suite>/<task>/<family>/")
    g.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    g.add_argument("--families", default=None, metavar="LIST",
                   help="comma-separated families and/or inserted objects (default: all)")
    g.add_argument("--review", default=None, metavar="HTML",
                   help="also write one self-contained page with a random sample of the variants, clean and "
                        "perturbed side by side, to read before trusting a run")
    g.add_argument("--review-size", type=int, default=40, metavar="N",
                   help="variants on the review page (default: 40; drawn with --seed)")
    g.set_defaults(func=_cmd_generate)
    v = sub.add_parser("verify", help="re-check every variant manifest below a folder, or check a suite's "
                                      "authored edits and variants (seeds 0-4) with the realism lint "
                                      "(and, with --judge-model, a model's blind read of their texts); "
                                      "exit 1 on any breach.")
    v.add_argument("folder", help="folder written by 'agentperturb generate', or a suite folder, a task folder, "
                                  "agentdojo[:suite] or tau2[:domain]")
    from .check import add_arguments, add_show

    add_arguments(v)
    v.set_defaults(func=_cmd_verify)
    add_show(sub)
