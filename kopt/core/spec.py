"""Sweep specs: load and validate ``sweeps/NAME/sweep.yaml`` (format: docs/spec.md).

Everything is checked before anything runs: the YAML schema (pydantic), the
kernel prototype, the catalog method ids, the restriction expressions, the
baseline, how every scalar ``solve`` argument gets its value and, in kernel
mode (``launch:``), the launch-geometry expressions. Errors are
:class:`SpecError` and name the file, the field and what was expected.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib.util
import itertools
import json
import keyword
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from kopt.core import names as macros
from kopt.core.catalog import Catalog, load_catalog
from kopt.core.contract import (
    ContractError,
    Signature,
    parse_signature_file,
    read_text,
    too_deep,
    yaml_error_line,
)
from kopt.core.restrictions import _FUNCS, all_of, inline
from kopt.util.paths import resolved
from workers import deps
from workers.build import arch_flag
from workers.ctypes_map import scalar_range
from workers.expr import ExprError, parse
from workers.launch_geometry import launch_geometry as evaluate_launch

Scalar = int | float | str
MAX_ARG_ELEMENTS = 2**38  # elements of one buffer: beyond any device's memory
BACKEND_SUFFIXES = {".cu": "cuda", ".cpp": "cpu", ".cc": "cpu", ".cxx": "cpu"}


class SpecError(ValueError):
    """A sweep spec is invalid. The message names the file, the field and the fix."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Band(_Model):
    """One output's band: ``|out - ref| <= atol + rtol * |ref|`` (torch.isclose's rule)."""

    atol: float = Field(1e-5, ge=0)
    rtol: float = Field(1e-5, ge=0)


class Tolerance(Band):
    """Per-element check ``|out - ref| <= atol + rtol * |ref|`` (torch.isclose's rule) for
    every floating-point output (integer and bool outputs are compared exactly), and
    ``outputs``: a band of its own for a named output of ``solve`` (e.g. an exact in/out
    residual beside a normalized output: ``outputs: {residual: {atol: 0, rtol: 0}}``);
    workers.records.band_of picks one."""

    outputs: dict[str, Band] = {}



class Timing(_Model):
    """How each candidate is timed (units: ms, counts, s)."""

    warmup_ms: float = Field(25.0, ge=0, le=3.6e6)
    min_samples: int = Field(10, ge=3)
    max_samples: int = Field(200, ge=3)
    max_time_ms: float = Field(2000.0, gt=0, le=3.6e6)
    target_rel_error: float = Field(0.005, gt=0)
    timeout_s: float = Field(60.0, gt=0, le=86400)  # a day at most
    # flush the L2 (CPU backend: the last-level cache) before each sample; false only where
    # a cold cache is not the question (bench/driver.py: kopt's own overhead)
    flush: bool = True
    # CPU backend: the harness's thread at SCHED_FIFO for each job (workers.priority), so
    # other processes of the machine cannot preempt a timed call; needs root or CAP_SYS_NICE
    realtime: bool = False

    @model_validator(mode="after")
    def _order(self) -> Timing:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples ({self.min_samples}) is above max_samples "
                             f"({self.max_samples})")
        return self


class Ncu(_Model):
    """Nsight Compute capture settings (used by the optimization loop)."""

    top_k: int = Field(3, ge=0)
    sections: list[str] | None = None
    metrics: list[str] | None = None
    # profile the baseline first so that its triggers prune iteration 1 (off: iteration 1
    # treats every method as triggered; see docs/verified/2026-11-30-h200-loop.md)
    profile_baseline: bool = False
    # the problem size each profile captures: an index into `dims:` (the backend's own list);
    # None: the size whose dims JSON sorts first (kopt.loop.profiling). A sweep whose sizes
    # span regimes names the one its NCU evidence should speak for (the DRAM-bound one, say)
    dims: int | None = Field(None, ge=0)


class Review(_Model):
    """The review gate's extra validation command: run on each iteration's
    winner, in the sweep's folder, through the shell, with the winner in ``KOPT_*``
    environment variables (docs/spec.md); exit status 0 accepts it. ``timeout_s``: seconds
    before its process group is killed (the winner is then rejected)."""

    command: str = Field(min_length=1)
    timeout_s: float = Field(300.0, gt=0, le=86400)


class SubmitSettings(_Model):
    """``kopt submit``'s settings: ``max_tries`` submissions per iteration (the first and
    its fixes); ``kopt submit --max-tries`` overrides it."""

    max_tries: int = Field(3, ge=1)


class MethodRealization(_Model):
    """How one kernel realizes a catalog method: defines always passed, extra params.

    ``needs_sm90a``: this kernel's realization needs the ``sm_90a`` target even where the
    catalog's method does not (gemm_cutlass_fp32's ``memory.async_copy`` is TMA feeding
    wgmma): its candidates are built for sm_90a, and on any other device class the method
    is skipped as ``arch_incompatible``, like a catalog arch gate. CUDA backends only.
    """

    defines: dict[str, Scalar] = {}
    params: dict[str, list[Scalar]] = {}
    needs_sm90a: bool = False

    @field_validator("params")
    @classmethod
    def _nonempty(cls, v: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for k, vals in v.items():
            if not vals:
                raise ValueError(f"param {k!r} has an empty list of values")
        return v


class Launch(_Model):
    """Kernel mode: the ``__global__`` kernel to launch and its geometry.

    ``block`` (threads per block) and ``grid`` (blocks) take 1 to 3 entries
    (x, y, z); each entry, like ``smem_bytes`` (dynamic shared memory, bytes),
    is an integer or an expression over launch params, dims and scalars, e.g.
    ``"(N + BX * TX - 1) // (BX * TX)"``.
    """

    kernel: str = Field(pattern=r"^[A-Za-z_]\w*$")
    block: list[str | int] = Field(min_length=1, max_length=3)
    grid: list[str | int] = Field(min_length=1, max_length=3)
    smem_bytes: str | int = 0


# sweep.yaml's ``derived:``: name -> an expression (or a number) over params, method
# params/defines, dims, scalars and the names above it (evaluated in order)
Derived = dict[str, str | StrictInt | StrictFloat]


class BackendBlock(_Model):
    """One backend's source and search space."""

    kernel: str
    launch: Launch | None = None
    derived: Derived = {}
    params: dict[str, list[Scalar]] = {}
    restrictions: list[str] = []
    baseline: dict[str, Scalar] = {}
    methods: dict[str, MethodRealization] = {}
    flags: list[str] = []
    dims: list[dict[str, StrictInt]] | None = None
    check_dims: list[dict[str, StrictInt]] | None = None
    include_dirs: list[str] = []
    needs_sm90a: bool = False
    timing: Timing | None = None


# a sweep's name is a store folder's (``sweep=NAME``): file systems cap one at 255 bytes
MAX_NAME = 128
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.-]")
NAME_RULE = (f"at most {MAX_NAME} characters: letters, digits, _ . -, not . or - first")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a sweep -- its store folder ``sweep=NAME`` (the one rule
    for a ``name:`` and, without one, the sweep folder's name: :data:`NAME_RULE`): its
    length, a first ``.`` or ``-``, or the characters it holds that the rule has not; None
    when it can. E.g. ``"'sw (1)' holds ' ', '(', ')'"``."""
    if len(name) > MAX_NAME:
        return f"({len(name)} characters) is too long to be the sweep's store folder"
    if not name:
        return "is empty"
    bad = list(dict.fromkeys(c for c in name if not _NAME_CHARS.fullmatch(c)))
    if bad:
        return f"{name!r} holds {', '.join(map(repr, bad))}"
    if name[0] in ".-":
        return f"{name!r} starts with {name[0]!r}"
    return None


class SweepFile(_Model):
    """The whole of sweep.yaml (schema; semantic checks come after)."""

    name: str | None = None  # checked by name_problem, as the folder's name is
    kernel: str
    launch: Launch | None = None
    reference: str = "ref.py"
    dims: list[dict[str, StrictInt]] = Field(min_length=1)
    # problem sizes a contest checks its contenders on, never timed or tuned on (a kernel
    # that hard-codes the tuned sizes fails there); each has the keys of `dims`
    check_dims: list[dict[str, StrictInt]] = []
    tolerance: Tolerance = Tolerance()
    args: dict[str, list[str | int]] = {}
    scalars: dict[str, float | int] = {}
    derived: Derived = {}
    params: dict[str, list[Scalar]] = {}
    restrictions: list[str] = []
    baseline: dict[str, Scalar] = {}
    methods: dict[str, MethodRealization] = {}
    flags: list[str] = []
    include_dirs: list[str] = []
    needs_sm90a: bool = False
    timing: Timing = Timing()
    seed: int = Field(0, ge=0, le=2**63 - 16)  # seeds seed, seed + 1, ... fit torch's int64
    flops: str | None = None
    bytes: str | None = None
    iterations: int = Field(1, ge=1)
    ncu: Ncu = Ncu()
    review: Review | None = None
    submit: SubmitSettings = SubmitSettings()
    # time ref.py's contender (else reference) as a row of its own per problem
    # size and device class; every table shows candidates against it
    reference_timing: StrictBool = True
    cpu: BackendBlock | None = None
    cuda: BackendBlock | None = None


@dataclass
class Space:
    """One backend's validated search space.

    Attributes:
        backend: ``"cuda"`` or ``"cpu"``.
        source: absolute path of the kernel file.
        signature: the parsed ``solve`` prototype (kernel mode: the ``__global__`` kernel's).
        params: launch params, name -> values (baseline values first).
        restrictions: the raw expressions.
        baseline: baseline params (every param has one).
        methods: method id -> realization, only ids in the catalog.
        flags: extra compiler flags.
        dims: problem sizes for this backend.
        include_dirs: extra -I paths (absolute; a ``pkg:`` entry resolved to the folder
            inside the installed Python package, see :func:`include_dir`).
        needs_sm90a: every candidate needs the ``sm_90a`` target (CUDA only): kopt builds
            them all for ``sm_90a`` and records that as their ``arch``; a device of another
            arch cannot run the sweep (kopt.core.expand refuses it).
        timing: the timing settings for this backend.
        launch: kernel mode's kernel and launch geometry, its derived names inlined (every
            expression names only params, dims and scalars); None for a ``solve`` source.
        derived: the block's ``derived:`` quantities in order, name -> expression with the
            derived names before it inlined (over params, method params/defines, dims and
            scalars only). Never a define: they change no candidate or build id.
    """

    backend: str
    source: Path
    signature: Signature
    params: dict[str, list[Scalar]]
    restrictions: list[str]
    baseline: dict[str, Scalar]
    methods: dict[str, MethodRealization]
    flags: list[str]
    dims: list[dict[str, int]]
    include_dirs: list[str] = field(default_factory=list)
    check_dims: list[dict[str, int]] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    launch: Launch | None = None
    derived: dict[str, str] = field(default_factory=dict)
    needs_sm90a: bool = False
    spec_path: Path | None = None
    prefix: str = ""

    def resolve(self, text: str) -> str:
        """``text`` (a restriction) with this space's derived names inlined
        (:func:`kopt.core.restrictions.inline`): what expansion evaluates. Unchanged when it names
        none."""
        return inline(text, self.derived)

    def derived_values(self, env: dict[str, Any]) -> dict[str, Any]:
        """Each derived quantity's value for ``env`` (a candidate's defines with its dims and
        the scalars), name -> number in the order written: the figures a tile model gives,
        e.g. ``{"warps": 8, "BM": 64, ...}``. A quantity that needs a name ``env`` lacks (a
        method param of another method), divides by zero or is out of bounds is left out."""
        out = {}
        for name, text in self.derived.items():
            try:
                out[name] = parse(text)(env)
            except (KeyError, ZeroDivisionError, ExprError):
                continue
        return out

    def source_text(self) -> str:
        """The kernel source's text (read now)."""
        return read_text(self.source, SpecError)

    def local_inputs(self) -> dict[str, str]:
        """``{path relative to the source's folder: sha256}`` of every local file the source
        reaches through ``#include`` (recursively; found in its own folder or in
        ``include_dirs``; every ``#include`` line counts, whatever ``#if`` it sits under).
        Empty when it includes none. Each file is hashed once per process while its size
        and times stay the same (workers.deps)."""
        return deps.local_inputs(self.source_text(), str(self.source.parent),
                                 self.include_dirs)

    @property
    def mode(self) -> str:
        """``"kernel"`` (a ``__global__`` kernel launched by kopt, built with NVRTC) when the
        space has ``launch:``, else ``"solve"`` (a host ``solve`` built with nvcc / c++)."""
        return "kernel" if self.launch is not None else "solve"

    @property
    def toolchain(self) -> str:
        """The compiler family that builds this space: ``nvrtc`` (kernel mode), ``cuda``
        (nvcc) or ``cpu`` (c++); what workers.build.compiler_identity takes."""
        return "nvrtc" if self.launch is not None else self.backend

    def launch_spec(self) -> dict[str, Any] | None:
        """The launch block as plain data (kernel, block, grid, smem_bytes), None in solve
        mode: what a kernel-mode build job carries to the harness."""
        return self.launch.model_dump() if self.launch is not None else None


@dataclass
class Sweep:
    """A loaded, validated sweep: shared settings plus one Space per backend.

    ``warnings`` holds one line per thing that loads but cannot be what the author meant
    (a method no launch config of which survives the restrictions); the CLI prints them as
    ``note:`` lines.
    """

    name: str
    root: Path
    spec_path: Path
    reference: Path
    tolerance: Tolerance
    args: dict[str, list[str | int]]
    scalars: dict[str, float | int]
    timing: Timing
    seed: int
    iterations: int
    ncu: Ncu
    spaces: dict[str, Space]
    primary: str
    raw: dict[str, Any]
    flops: str | None = None
    bytes: str | None = None
    warnings: list[str] = field(default_factory=list)
    review: Review | None = None
    submit: SubmitSettings = field(default_factory=SubmitSettings)
    reference_timing: bool = True

    def work(self, dims: dict[str, int]) -> tuple[float | None, float | None]:
        """(floating-point operations, bytes moved) of one ``solve`` call at ``dims``, from the
        spec's ``flops``/``bytes`` expressions; None where the spec gives none."""
        env = {**self.scalars, **dims}
        return (float(parse(self.flops)(env)) if self.flops else None,
                float(parse(self.bytes)(env)) if self.bytes else None)

    @property
    def spec_hash(self) -> str:
        """sha256 (16 hex) of the spec and every source it names, with the local headers
        each includes (Space.local_inputs): changes when any of them does."""
        h = hashlib.sha256(json.dumps(self.raw, sort_keys=True, default=str).encode())
        for sp in self.spaces.values():
            h.update(sp.source.read_bytes())
            inputs = sp.local_inputs()
            if inputs:
                h.update(json.dumps(inputs, sort_keys=True).encode())
        h.update(self.reference.read_bytes())
        return h.hexdigest()[:16]

    def space(self, backend: str) -> Space:
        """The Space for ``backend``; SpecError if the sweep has no source for it."""
        if backend not in self.spaces:
            raise SpecError(
                f"{self.spec_path}: this sweep has no {backend} source (backends: "
                f"{', '.join(sorted(self.spaces))}); add a `{backend}:` block with `kernel:`")
        return self.spaces[backend]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML would keep the last)."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen = set()
    for k, _ in node.value:
        key = loader.construct_object(k, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (the second would silently replace "
                "the first)", k.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)

def _fmt_loc(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as kopt's other spec errors name a field: ``dims[0].N``."""
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


# pydantic's location tags of a union's members (a launch param value: int | float | str)
_UNION_TAGS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "a boolean"}


def _merged_unions(errors: list[Any]) -> list[Any]:
    """``errors`` with the errors of one value that no member of its union type took (two
    or more, each located at the value plus a type tag) merged into one error at the value:
    "Input should be an integer, a number or a string"."""
    tried: dict[tuple[Any, ...], list[str]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if len(loc) > 1 and loc[-1] in _UNION_TAGS:
            tried.setdefault(loc[:-1], []).append(_UNION_TAGS[loc[-1]])
    out: list[Any] = []
    for err in errors:
        loc = tuple(err["loc"])
        kinds = tried.get(loc[:-1], []) if len(loc) > 1 else []
        if len(kinds) < 2 or loc[-1] not in _UNION_TAGS:
            out.append(err)
        elif kinds[0] == _UNION_TAGS[loc[-1]]:  # the value's first error stands for them all
            either = ", ".join(kinds[:-1]) + f" or {kinds[-1]}"
            out.append({**err, "loc": loc[:-1], "msg": f"Input should be {either}"})
    return out


def _field_names(loc: tuple[Any, ...]) -> list[str]:
    """The fields sweep.yaml's schema takes at ``loc`` (a path of field names from the top;
    list indices and dict keys skipped): the candidates for a misspelt field's name."""
    model: Any = SweepFile
    key_next = False  # the part after a mapping's field is one of its keys
    for part in loc:
        if key_next or not isinstance(part, str):
            key_next = False
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        inner = [a for a in (typing.get_args(field.annotation) or (field.annotation,))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        if not inner:
            return []
        key_next = typing.get_origin(field.annotation) is dict
        model = inner[0]
    return list(model.model_fields)


def _schema_error_line(spec_path: Path, err: Any) -> str:
    """One line for one pydantic error of sweep.yaml: the file, the field, what is wrong and
    the fix."""
    field = _fmt_loc(err["loc"])
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(str(err["loc"][-1]), _field_names(err["loc"][:-1]),
                                         n=1)
        why = ("unknown field; " + (f"did you mean '{near[0]}'? " if near else "")
               + "remove it or correct its name (docs/spec.md lists the fields a sweep.yaml "
               "takes)")
    elif err["type"] == "missing":
        up, _, leaf = field.rpartition(".")
        where = f"`{leaf}:` under `{up}:`" if up else f"`{field}:`"
        why = f"required field is missing; add {where} (docs/spec.md describes it)"
    else:
        why = (f"{err['msg']} (got {err.get('input')!r}); write it in the form docs/spec.md "
               f"shows for `{field}`")
    return f"{spec_path}: field '{field}': {why}"


def load_sweep(path: str | Path, catalog: Catalog | None = None) -> Sweep:
    """Load and validate a sweep folder (or its sweep.yaml).

    Args:
        path: ``sweeps/NAME`` or ``sweeps/NAME/sweep.yaml``.
        catalog: the method catalog (default: the shipped one).

    Returns:
        The validated Sweep.

    Raises:
        SpecError: anything wrong, naming the file and field.
    """
    p = Path(path)
    spec_path = p / "sweep.yaml" if p.is_dir() else p
    if not spec_path.exists():
        raise SpecError(f"{spec_path}: no such file; a sweep folder holds sweep.yaml, the kernel "
                        "source and ref.py (see docs/spec.md)")
    root = resolved(spec_path.parent)
    try:
        raw = yaml.load(read_text(spec_path, SpecError), Loader=_UniqueKeyLoader)
    except RecursionError:
        raise SpecError(too_deep(spec_path, "YAML")) from None
    except yaml.YAMLError as e:
        raise SpecError(f"{spec_path}: not valid YAML: {yaml_error_line(e)}; fix the YAML "
                        "there (docs/spec.md shows a whole sweep.yaml)") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{spec_path}: expected a mapping at the top level (kernel:, dims:, ...)")
    try:
        sf = SweepFile.model_validate(raw)
    except ValidationError as e:  # one line per error, each complete
        raise SpecError("\n".join(_schema_error_line(spec_path, err)
                                  for err in _merged_unions(e.errors()))) from None
    return _resolve(sf, raw, spec_path, root, catalog or load_catalog())


class _FieldError:
    """``err(field, message)``: the SpecError that names sweep.yaml and the field."""

    def __init__(self, spec_path: Path):
        self.spec_path = spec_path

    def __call__(self, fieldname: str, msg: str) -> SpecError:
        return SpecError(f"{self.spec_path}: field '{fieldname}': {msg}")


def _resolve(sf: SweepFile, raw: dict[str, Any], spec_path: Path, root: Path,
             catalog: Catalog) -> Sweep:
    """The validated file ``sf`` checked against the sweep folder ``root`` and the catalog,
    resolved into a :class:`Sweep` (one :class:`Space` per backend section)."""
    err = _FieldError(spec_path)
    why = name_problem(sf.name if sf.name is not None else root.name)
    if why:
        raise err("name", ("missing, and the folder's name " if sf.name is None else
                           "the name ") + f"{why}; give `name:` ({NAME_RULE})")
    ref = root / sf.reference
    if not ref.exists():
        raise err("reference", f"file {ref} does not exist; it must define reference(**kwargs)")
    _check_ref(ref, err)
    top, primary, blocks = _backend_blocks(sf, err)
    # the top level's derived names, which args, flops and bytes may use too
    shared = _check_derived(sf.derived, _scope(top, sf.dims, sf.scalars), "", err)
    work = {fname: _work(fname, getattr(sf, fname), sf, shared, err)
            for fname in ("flops", "bytes")}
    spaces, notes = {}, ref_name_notes(ref)
    for backend, (prefix, blk) in blocks.items():
        spaces[backend] = _space(backend, prefix, blk, sf, root, catalog, err, shared,
                                 spec_path)
        sp = spaces[backend]
        _check_output_bands(sf.tolerance, sp.signature, err)
        if sf.ncu.dims is not None and sf.ncu.dims >= len(sp.dims):
            raise err("ncu.dims", f"{sf.ncu.dims} is no index of {prefix}dims (its "
                      f"{len(sp.dims)} problem sizes are 0 .. {len(sp.dims) - 1}); give the "
                      "index of the size NCU should profile")
        notes += [f"{spec_path}: {msg}" for msg in [
            *dead_methods(sp, catalog, prefix), *macros.unread_notes(sp, prefix),
            *macros.text_value_notes(sp, prefix),
            *macros.zero_division_notes(sp, catalog, prefix)]]
    return Sweep(
        name=sf.name or root.name, root=root, spec_path=spec_path, reference=ref,
        tolerance=sf.tolerance, scalars=sf.scalars, timing=sf.timing,
        args={a: [_inlined(e, shared, f"args.{a}[{j}]", err) if isinstance(e, str) else e
                  for j, e in enumerate(shape)] for a, shape in sf.args.items()},
        seed=sf.seed, iterations=sf.iterations, ncu=sf.ncu, spaces=spaces, primary=primary,
        raw=raw, flops=work["flops"], bytes=work["bytes"], warnings=notes, review=sf.review,
        submit=sf.submit, reference_timing=sf.reference_timing)


def _check_output_bands(tol: Tolerance, sig: Any, err: Any) -> None:
    """Every name under ``tolerance.outputs`` is an output (``T*``) of ``sig``: a band for an
    input or a misspelt name would check nothing."""
    outs = [a.name for a in sig.outputs]
    for name in tol.outputs:
        if name not in outs:
            near = difflib.get_close_matches(name, outs, n=1)
            raise err(f"tolerance.outputs.{name}",
                      f"{name!r} is not an output of {sig.describe()} (its outputs: "
                      f"{', '.join(outs) or 'none'}); "
                      + (f"did you mean {near[0]!r}?" if near else "name one of them"))


def _backend_blocks(sf: SweepFile, err: Any
                    ) -> tuple[BackendBlock, str, dict[str, tuple[str, BackendBlock]]]:
    """The top level as a backend block, its backend, and every backend's block with its
    field prefix (``""``, ``cpu.``, ``cuda.``)."""
    blocks: dict[str, tuple[str, BackendBlock]] = {}
    top = BackendBlock(kernel=sf.kernel, launch=sf.launch, derived=sf.derived, params=sf.params,
                       restrictions=sf.restrictions, baseline=sf.baseline, methods=sf.methods,
                       flags=sf.flags, include_dirs=sf.include_dirs,
                       needs_sm90a=sf.needs_sm90a)
    primary = _backend_of(sf.kernel, err, "kernel")
    blocks[primary] = ("", top)
    for name in ("cpu", "cuda"):
        blk = getattr(sf, name)
        if blk is None:
            continue
        b = _backend_of(blk.kernel, err, f"{name}.kernel")
        if b != name:
            raise err(f"{name}.kernel", f"{blk.kernel} is a {b} source, not {name}")
        if name in blocks:
            raise err(name, f"the top-level kernel is already the {name} source; "
                            f"put the other backend's source in this block")
        blocks[name] = (f"{name}.", blk)
    return top, primary, blocks


def _work(fname: str, text: str | None, sf: SweepFile, shared: dict[str, str], err: Any
          ) -> str | None:
    """``flops`` or ``bytes`` (``fname``): the expression ``text`` over dims and scalars, its
    derived names written in, checked at every problem size (0 or more); None when unset."""
    if text is None:
        return None
    try:
        e = parse(text)
    except ExprError as ex:
        raise err(fname, str(ex)) from None
    dim_names = {k for d in sf.dims for k in d} | set(sf.scalars)
    if not e.names <= dim_names | shared.keys():
        raise err(fname, f"{text!r} names {sorted(e.names - dim_names - shared.keys())}, "
                  "which are neither dims, scalars nor derived names; write it over the dims "
                  f"({', '.join(sorted({k for d in sf.dims for k in d}))}) and scalars, or "
                  "add the name to `scalars` or `derived:`")
    via = ", ".join(sorted(shared.keys() & e.names))
    inlined = _inlined(text, shared, fname, err)
    e = parse(inlined)
    if not e.names <= dim_names:
        raise err(fname, f"{text!r} names {sorted(e.names - dim_names)} "
                  f"through its derived names ({via}), which are not dims or scalars: the "
                  "work of one call is the same for every launch config")
    for where, i, d in _all_dims(sf):
        try:
            amount = float(e({**sf.scalars, **d}))
        except KeyError:
            continue  # a backend's own dims without that name: Sweep.work is not asked
        except ZeroDivisionError:
            raise err(fname, f"{text!r} divides by zero at {where}[{i}] = {d}") from None
        except (ExprError, OverflowError) as ex:
            raise err(fname, f"cannot evaluate at {where}[{i}] = {d}: {ex}; write the "
                      "work of one call with smaller operands") from None
        if not amount >= 0:  # a negative (or NaN) amount of work: every rate would lie
            raise err(fname, f"{text!r} is {amount:g} at {where}[{i}] = {d}; "
                      f"{fname} counts the work of one call: 0 or more")
    return inlined


# Most restriction evaluations one method's check may take (its space projected on the
# names the restrictions use; beyond that, loading would wait on it: no verdict).
DEAD_METHOD_BUDGET = 200_000


def dead_methods(space: Space, catalog: Catalog, prefix: str = "") -> list[str]:
    """One line per realized method that no launch config can carry past the restrictions
    (at every problem size), naming the restriction(s) that remove them all, e.g.
    ``methods.memory.vectorized_access: no launch config survives restrictions[2]
    ('VEC * THREADS <= 512'); the method can never run``.

    A method is checked with the methods it ``requires`` (other methods only add params and
    restrictions). A method whose check would take more than DEAD_METHOD_BUDGET
    evaluations, or whose restrictions cannot be evaluated, gets no line (expansion
    reports the latter).
    """
    exprs = [parse(space.resolve(r)) for r in space.restrictions]
    out = []
    for mid in space.methods:
        group = [m for m in catalog.methods[mid].requires if m in space.methods] + [mid]
        if len(group) <= len(catalog.methods[mid].requires):
            continue  # a required method is not realized: the method never runs anyway
        order = {a: i for i, a in enumerate(("compute", "memory", "latency"))}
        group.sort(key=lambda m: order.get(catalog.methods[m].axis, 3))
        pspace: dict[str, list[Scalar]] = dict(space.params)
        mdefines: dict[str, Scalar] = {}
        for m in group:
            pspace.update(space.methods[m].params)
            mdefines.update(space.methods[m].defines)
        try:
            culprits = _culprits(exprs, pspace, mdefines, space.dims)
        except (ExprError, _TooLarge):
            continue
        if culprits:
            refs = " and ".join(f"{prefix}restrictions[{i}] ({space.restrictions[i]!r})"
                                for i in culprits)
            out.append(f"{prefix}methods.{mid}: no launch config survives {refs}"
                       f"{' together' if len(culprits) > 1 else ''}; the method can never run")
    return out


class _TooLarge(Exception):
    """A dead-method check would exceed DEAD_METHOD_BUDGET evaluations."""


def _culprits(exprs: list[Any], pspace: dict[str, list[Scalar]], mdefines: dict[str, Scalar],
              dims: list[dict[str, int]]) -> list[int]:
    """Indices of a minimal set of restrictions under which no config of ``pspace`` passes at
    any dims (env: dims, method defines, params, as expansion builds it); [] when some
    config survives them all."""
    budget = [DEAD_METHOD_BUDGET]

    def dead(keep: set[int]) -> bool:
        for d in dims:
            env = {**d, **mdefines}
            have = env.keys() | pspace.keys()
            rs = [exprs[i] for i in sorted(keep) if exprs[i].names <= have]
            names = sorted({n for r in rs for n in r.names} & pspace.keys())
            size = math.prod(len(pspace[n]) for n in names)
            budget[0] -= size
            if budget[0] < 0:
                raise _TooLarge
            holds = all_of(rs, names, env)
            for values in itertools.product(*(pspace[n] for n in names)):
                try:
                    if holds(values):
                        return False
                except ZeroDivisionError:
                    continue
        return True

    keep = set(range(len(exprs)))
    if not dead(keep):
        return []
    for i in range(len(exprs)):
        if dead(keep - {i}):
            keep.discard(i)
    return sorted(keep)


def _all_dims(sf: SweepFile) -> list[tuple[str, int, dict[str, int]]]:
    """(field, index, dims) of every problem size the spec gives, the backends' own too."""
    out = [("dims", i, d) for i, d in enumerate(sf.dims)]
    for name in ("cpu", "cuda"):
        blk = getattr(sf, name)
        if blk is not None and blk.dims is not None:
            out += [(f"{name}.dims", i, d) for i, d in enumerate(blk.dims)]
    return out


def _backend_of(kernel: str, err: Any, fieldname: str) -> str:
    suffix = Path(kernel).suffix
    if suffix not in BACKEND_SUFFIXES:
        raise err(fieldname, f"{kernel!r}: unknown source suffix {suffix!r}; expected "
                             ".cu (cuda) or .cpp/.cc/.cxx (cpu)")
    return BACKEND_SUFFIXES[suffix]


# what ref.py may define, and the fix for each when it is not a function
REF_FUNCTIONS = {
    "inputs": "define `def inputs(seed, **dims)` returning the input tensors by name, or "
              "remove it (kopt then draws random inputs)",
    "reference": "define `def reference(**kwargs)` returning the expected output tensor (or a "
                 "dict of them by argument name)",
    "contender": "define `def contender(**kwargs)` returning the output as reference() does, "
                 "or remove it (kopt then times `reference`)",
    "stress_inputs": "define `def stress_inputs(seed, **dims)` returning inputs as inputs() "
                     "does from a second distribution (heavy-tailed, real magnitudes), or "
                     "remove it (contests then check on inputs() only)"}
# expressions whose value is never callable: `contender = 5` would be ignored at run time
_NOT_CALLABLE = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr,
                 ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)


def _check_ref(ref: Path, err: Any) -> None:
    try:
        tree = ast.parse(read_text(ref, ContractError, python=True), str(ref))
    except ContractError as e:
        raise err("reference", str(e)) from None
    except SyntaxError as e:
        raise err("reference", f"{ref} does not parse: {e}") from None
    except (RecursionError, MemoryError):  # Python's parser: MemoryError past its own limit
        raise err("reference", too_deep(ref, "Python")) from None
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "reference" not in funcs:
        raise err("reference", f"{ref} must define `def reference(**kwargs)` returning the "
                               "expected output tensor (or a dict of them by argument name)")
    for name, node in _bindings(tree).items():  # `contender = 5` would be ignored at run time
        value = getattr(node, "value", None)
        if name in REF_FUNCTIONS and isinstance(value, _NOT_CALLABLE):
            raise err("reference", f"{ref}: `{name}` (line {node.lineno}) is "
                                   f"{ast.unparse(value)[:40]}, not a function; "
                                   f"{REF_FUNCTIONS[name]}")


def ref_name_notes(ref: Path) -> list[str]:
    """Notes on ref.py's top-level functions whose names look like an optional function of
    :data:`REF_FUNCTIONS` that it does not define (``make_inputs`` or ``input`` with no
    ``inputs``: kopt then draws its own random inputs, and a new user's misspelt
    ``inputs()`` ran a whole sweep unnoticed). [] for a file that cannot be read or
    parsed (load_sweep refuses those)."""
    import difflib

    try:
        bound = _bindings(ast.parse(read_text(ref, ContractError, python=True), str(ref)))
    except (ContractError, SyntaxError, RecursionError, MemoryError):
        return []
    funcs = [n for n, node in bound.items() if isinstance(node, ast.FunctionDef)
             and not n.startswith("_") and n not in REF_FUNCTIONS]
    out = []
    for want in (w for w in ("inputs", "contender", "stress_inputs") if w not in bound):
        for f in funcs:
            if f.endswith(want) or difflib.SequenceMatcher(None, f, want).ratio() >= 0.8:
                out.append(f"{ref}: `{f}` is not a function kopt calls; did you mean "
                           f"`{want}`? ({REF_FUNCTIONS[want]})")
    return out


def ref_functions(ref: Path) -> set[str]:
    """The names of :data:`REF_FUNCTIONS` (``inputs``, ``reference``, ``contender``,
    ``stress_inputs``) that ref.py at ``ref`` binds at its top level, read from its syntax
    tree (nothing is imported or run). Raises ContractError for a file that cannot be read
    and SyntaxError for one that does not parse (load_sweep has refused both already)."""
    tree = ast.parse(read_text(ref, ContractError, python=True), str(ref))
    return set(_bindings(tree)) & set(REF_FUNCTIONS)


def _bindings(tree: ast.Module) -> dict[str, ast.stmt]:
    """Each name a module binds at its top level -> the statement that binds it last (a
    def, a class, an import or an assignment): what the name holds once it is imported."""
    last: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            last[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            last.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            last.update({t.id: node for t in targets if isinstance(t, ast.Name)})
    return last


def _space(backend: str, prefix: str, blk: BackendBlock, sf: SweepFile, root: Path,
           catalog: Catalog, err: Any, shared: dict[str, str], spec_path: Path) -> Space:
    """One backend's section of sweep.yaml (``prefix``: ``cpu.`` / ``cuda.`` or "") checked
    and resolved into a :class:`Space`; ``err(field, message)`` makes the SpecError."""
    src = root / blk.kernel
    if not src.exists():
        near = difflib.get_close_matches(src.name, [f.name for f in root.iterdir()
                                                    if f.is_file()], n=1) if root.is_dir() else []
        raise err(f"{prefix}kernel", f"file {src} does not exist"
                  + (f"; did you mean {near[0]!r}?" if near else ""))
    if blk.launch is not None and backend != "cuda":
        raise err(f"{prefix}launch", f"kernel mode (`launch:`) launches a CUDA __global__ kernel; "
                  f"{blk.kernel} is a {backend} source: drop `launch:` and export solve()")
    try:
        sig = parse_signature_file(src, blk.launch.kernel if blk.launch else None)
    except ContractError as e:
        raise err(f"{prefix}launch.kernel" if blk.launch else f"{prefix}kernel", str(e)) from None
    dims = blk.dims if blk.dims is not None else sf.dims
    if not dims:
        raise err(f"{prefix}dims", "needs at least one problem size, e.g. [{N: 1048576}]")
    argnames = {a.name for a in sig.args}
    for a in sf.args:
        if a not in argnames:
            raise err(f"args.{a}", f"{src.name} has no {sig.name} argument {a!r} "
                                   f"(it has: {', '.join(a.name for a in sig.args)})")
    dp = prefix if blk.dims is not None else ""  # where these dims are written
    for i, d in enumerate(dims):
        _check_problem_size(i, d, sig, sf, dp, prefix, err)
        for a, shape in sf.args.items():
            _check_extents(a, shape, i, d, sf, shared, dp, err)
    check = _check_dims_of(blk, sf, dims, sig, shared, prefix, err)
    _check_param_names(blk, dims, sig, prefix, err)
    params = _checked_params(blk, catalog, prefix, err)
    derived = _check_derived(blk.derived, _scope(blk, dims, sf.scalars), prefix, err)
    _check_restrictions(blk, params, dims, derived, prefix, err)
    baseline = _baseline(blk, params, prefix, err)
    _check_baseline_in_space(blk, derived, dims, baseline, dp, prefix, err)
    launch = blk.launch
    if launch is not None:
        launch = _check_launch(launch, prefix, params, baseline, dims, sf.scalars, err, derived)
    _check_gpu_only_fields(backend, blk, prefix, err)
    incs = []
    for i, d in enumerate(blk.include_dirs):
        try:
            incs.append(str(include_dir(d, root)))
        except ValueError as e:
            raise err(f"{prefix}include_dirs[{i}]", str(e)) from None
    _check_include_dirs(blk.include_dirs, incs, prefix, err)
    return Space(
        backend=backend, source=resolved(src), signature=sig, params=params,
        restrictions=list(blk.restrictions), baseline=baseline, methods=dict(blk.methods),
        flags=list(blk.flags), dims=[dict(d) for d in dims], check_dims=check,
        include_dirs=incs, timing=blk.timing or sf.timing, launch=launch, derived=derived,
        needs_sm90a=blk.needs_sm90a, spec_path=spec_path, prefix=prefix)


def _check_dims_of(blk: BackendBlock, sf: SweepFile, dims: list[dict[str, int]], sig: Any,
                   shared: dict[str, str], prefix: str, err: Any) -> list[dict[str, int]]:
    """The backend's ``check_dims`` (its block's, else the top level's), each checked as a
    problem size is and with exactly the keys of ``dims``: the problem sizes a contest
    checks its contenders on (workers.harness ``Harness._check_dims``)."""
    check = blk.check_dims if blk.check_dims is not None else sf.check_dims
    cp = prefix if blk.check_dims is not None else ""
    keys = set(dims[0])
    for i, d in enumerate(check):
        if set(d) != keys:
            raise err(f"{cp}check_dims[{i}]", f"has the keys {sorted(d)}, the problem sizes "
                      f"{sorted(keys)}; give every dim of `dims` and no other")
        _check_problem_size(i, d, sig, sf, cp, prefix, err, field="check_dims")
        for a, shape in sf.args.items():
            _check_extents(a, shape, i, d, sf, shared, cp, err, field="check_dims")
    return [dict(d) for d in check]


def _check_problem_size(i: int, d: dict[str, int], sig: Any, sf: SweepFile, dp: str,
                        prefix: str, err: Any, field: str = "dims") -> None:
    """Problem size ``d`` (``dims[i]``): sizes >= 1, no name both a dim and a scalar, and every
    scalar argument of the kernel given a value its C type holds."""
    for k, v in d.items():
        if k in sf.scalars:
            raise err(f"scalars.{k}", f"{k!r} is also a dim ({dp}{field}[{i}]); a name is a dim "
                      "or a scalar, not both (the load's checks read one value, the run the "
                      "other): drop one of them")
        if v < 1:
            raise err(f"{dp}{field}[{i}].{k}", f"{v} is not a problem size: dims must be >= 1 "
                      "(an empty problem has nothing to measure); give values that are not "
                      "sizes in `scalars`")
    for s in sig.scalars:
        if s.name not in d and s.name not in sf.scalars:
            extra = sorted(set(sf.scalars) - {a.name for a in sig.args})
            raise err(f"{prefix}{field}[{i}]", f"{sig.name} argument {s.name!r} is a scalar "
                      "but is neither a dim nor in `scalars`; add "
                      f"{s.name}: <value> to one of them"
                      + (f" (`scalars` gives {', '.join(map(repr, extra))}, which "
                         f"{sig.name} does not take: a rename?)" if extra else ""))
        v = d.get(s.name, sf.scalars.get(s.name))
        lo, hi, integral = scalar_range(s.ctype)
        bad = (not float(v).is_integer() if integral else math.isnan(v)) or (
            math.isfinite(v) and not lo <= v <= hi)
        if bad or (integral and not math.isfinite(v)):
            where = f"{dp}{field}[{i}].{s.name}" if s.name in d else f"scalars.{s.name}"
            kind = "integers" if integral else "finite values up to +-"
            rng = f"{lo} .. {hi}" if integral else f"{hi:g}"
            raise err(where, f"{v} does not fit `{s.ctype} {s.name}` ({kind}{' ' * integral}"
                      f"{rng}); use a value of that range or a wider type")


def _check_extents(a: str, shape: list[Any], i: int, d: dict[str, int], sf: SweepFile,
                   shared: dict[str, str], dp: str, err: Any, field: str = "dims") -> None:
    """Argument ``a``'s extents at problem size ``d`` (``dims[i]``): each an integer >= 1, the
    buffer at most :data:`MAX_ARG_ELEMENTS` elements."""
    numel = 1
    for j, e in enumerate(shape):
        v = e if not isinstance(e, str) else _extent(a, j, e, i, d, sf, shared, dp, err)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise err(f"args.{a}[{j}]", f"{e!r} gives {v!r} with {dp}{field}[{i}] = {d}, "
                      "not a size: every extent must be an integer >= 1 (an empty "
                      "buffer has nothing to measure)")
        numel *= v
    if numel > MAX_ARG_ELEMENTS:
        raise err(f"args.{a}", f"{shape} gives {numel:,} elements with {dp}{field}[{i}] = "
                  f"{d}, over {MAX_ARG_ELEMENTS:,} (2^38): no device holds that; check "
                  "the extents")


def _extent(a: str, j: int, e: str, i: int, d: dict[str, int], sf: SweepFile,
            shared: dict[str, str], dp: str, err: Any) -> Any:
    """Extent expression ``e`` (``args.a[j]``) evaluated at problem size ``d``."""
    try:
        return parse(_inlined(e, shared, f"args.{a}[{j}]", err))({**d, **sf.scalars})
    except KeyError as ex:
        via = sorted(parse(e).names & shared.keys())
        via_s = f" through its derived names ({', '.join(via)})" if via else ""
        what = (f"{e!r} is" if e.strip() == ex.args[0] else
                f"{e!r} names {ex.args[0]!r}{via_s}, which is")
        raise err(f"args.{a}[{j}]", f"{what} "
                  f"neither a dim of {dp or 'the top-level '}dims[{i}] "
                  f"({', '.join(d) or 'none'}) nor in `scalars`; write the "
                  f"extent over those names, or give {ex.args[0]} in every "
                  "problem size of dims (or in `scalars`)") from None
    except ZeroDivisionError:
        raise err(f"args.{a}[{j}]", f"{e!r} divides by zero with "
                  f"{dp}dims[{i}] = {d}") from None
    except ExprError as ex:
        raise err(f"args.{a}[{j}]", f"cannot evaluate {e!r} with "
                  f"{dp}dims[{i}] = {d}: {ex}") from None


def _checked_params(blk: BackendBlock, catalog: Catalog, prefix: str, err: Any
                    ) -> dict[str, list[Any]]:
    """The launch params (no empty or repeated values), and the realized methods checked:
    catalog ids, method params not named like launch params."""
    params = {k: list(v) for k, v in blk.params.items()}
    for k, vals in params.items():
        if not vals:
            raise err(f"{prefix}params.{k}", "empty list of values")
        if len(set(map(repr, vals))) != len(vals):
            raise err(f"{prefix}params.{k}", f"repeated values in {vals}")
    for mid, real in blk.methods.items():
        if mid not in catalog.methods:
            close = difflib.get_close_matches(mid, list(catalog.methods), n=1, cutoff=0.6)
            hint = (f"did you mean {close[0]!r}? " if close else "")
            raise err(f"{prefix}methods.{mid}", f"unknown method id; {hint}`kopt catalog` "
                      "lists the catalog's ids")
        for k in real.params:
            if k in params:
                raise err(f"{prefix}methods.{mid}.params.{k}",
                          f"{k!r} is already a launch param; give method params their own names")
    return params


def _check_restrictions(blk: BackendBlock, params: dict[str, list[Any]],
                        dims: list[dict[str, int]], derived: dict[str, str], prefix: str,
                        err: Any) -> None:
    """Every restriction parses and names only params, method params/defines, dims and
    derived names (every backend's section, whatever this machine runs)."""
    known = set(params) | {k for d in dims for k in d}
    for real in blk.methods.values():
        known |= set(real.params) | set(real.defines)
    for i, r in enumerate(blk.restrictions):
        where = f"{prefix}restrictions[{i}]"
        try:
            names = parse(r).names
        except ExprError as e:
            raise err(where, str(e)) from None
        if names - known - derived.keys():
            raise err(where, f"{r!r} names {sorted(names - known - derived.keys())}, which are "
                      "neither params, method params/defines, dims nor derived names (known: "
                      f"{sorted(known | derived.keys())})")
        inner = parse(_inlined(r, derived, where, err)).names - known
        if inner:
            raise err(where, f"{r!r} names {sorted(inner)} through its derived names "
                      f"({', '.join(sorted(names & derived.keys()))}); restrictions see params, "
                      "method params/defines and dims, not scalars")


def _baseline(blk: BackendBlock, params: dict[str, list[Any]], prefix: str, err: Any
              ) -> dict[str, Any]:
    """The baseline launch config: ``baseline:``'s values, each param's first value else."""
    baseline = {}
    for k, vals in params.items():
        v = blk.baseline.get(k, vals[0])
        if v not in vals:
            raise err(f"{prefix}baseline.{k}", f"{v!r} is not one of the values {vals}")
        baseline[k] = v
    for k in blk.baseline:
        if k not in params:
            raise err(f"{prefix}baseline.{k}", f"not a launch param (params: {list(params)})")
    return baseline


def _check_baseline_in_space(blk: BackendBlock, derived: dict[str, str],
                             dims: list[dict[str, int]], baseline: dict[str, Any], dp: str,
                             prefix: str, err: Any) -> None:
    """The baseline (no methods) passes every restriction at every problem size."""
    for i, r in enumerate(blk.restrictions):
        expr = parse(inline(r, derived))
        for j, d in enumerate(dims):
            env = {**d, **baseline}
            if not expr.names <= env.keys():
                continue
            try:
                ok, why = bool(expr(env)), "violates"
            except ZeroDivisionError:  # expand excludes such a candidate too
                ok, why = False, "divides by zero in"
            except ExprError as ex:
                raise err(f"{prefix}restrictions[{i}]", f"cannot evaluate for the baseline "
                          f"{baseline} at {dp}dims[{j}] = {d}: {ex}; rewrite the restriction "
                          "with smaller operands") from None
            if not ok:
                raise err(f"{prefix}restrictions[{i}]",
                          f"the baseline {baseline} {why} {r!r} for {dp}dims[{j}] = {d}; "
                          f"change `{prefix}baseline` or the restriction")


def _check_gpu_only_fields(backend: str, blk: BackendBlock, prefix: str, err: Any) -> None:
    """No arch flag in ``flags`` (kopt picks the arch per device class), and ``needs_sm90a``
    only on the CUDA backend's section."""
    bad = arch_flag(blk.flags) if backend == "cuda" else None
    if bad is not None:
        raise err(f"{prefix}flags", f"{bad!r} sets the GPU arch, which kopt chooses per device "
                  "class (sm_90 on an H100/H200; sm_90a automatically for methods that need "
                  "it, or for every candidate with `needs_sm90a: true`) and records as the "
                  "`arch` column: remove it")
    if blk.needs_sm90a and backend != "cuda":
        raise err(f"{prefix}needs_sm90a", f"sm_90a is a GPU target; {blk.kernel} is a {backend} "
                  "source: drop `needs_sm90a` or move it to the CUDA backend's section")
    for mid, real in blk.methods.items():
        if real.needs_sm90a and backend != "cuda":
            raise err(f"{prefix}methods.{mid}.needs_sm90a", f"sm_90a is a GPU target; "
                      f"{blk.kernel} is a {backend} source: drop this `needs_sm90a`")


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_param_names(blk: BackendBlock, dims: list[dict[str, int]], sig: Any, prefix: str,
                       err: Any) -> None:
    """Each launch param, method param and method define reaches the compiler as
    ``-DNAME=VALUE``: SpecError at its field for a name that is no C identifier (``1NT``,
    ``a-b``, ``""``: every candidate a compile_error "macro names must be identifiers"),
    that is also a dim or a ``solve`` argument (``-DN=2`` rewrites the prototype, and
    the expressions would read two values for one name), or that kopt.core.names.reserved
    refuses (``int``, ``defined``, ``__cplusplus``, ``solve``, ``KOPT_DEVICE_CLASS``: the
    macro rewrites that name in the kernel and every header, and every candidate would be
    a compile_error)."""
    taken = {k: "dim" for d in dims for k in d}
    for a in sig.args:
        taken[a.name] = " and ".join(x for x in (taken.get(a.name), f"{sig.name} argument") if x)
    fields = [(f"{prefix}params.{k}", k) for k in blk.params]
    for mid, real in blk.methods.items():
        fields += [(f"{prefix}methods.{mid}.params.{k}", k) for k in real.params]
        fields += [(f"{prefix}methods.{mid}.defines.{k}", k) for k in real.defines]
    for where, k in fields:
        if not isinstance(k, str) or not _C_IDENTIFIER.fullmatch(k):
            raise err(where, f"{k!r} is not a C identifier: it is passed as a macro (-D{k}=...); "
                      "use letters, digits and _, not starting with a digit")
        if k in taken:
            raise err(where, f"{k!r} is also a {taken[k]}; it is passed as a macro (-D{k}=...), "
                      "which would replace that name in the kernel: rename the param")
        why = macros.reserved(k, sig.name)
        if why is not None:
            raise err(where, f"{k!r} is {why}; it is passed as a macro (-D{k}=...), which "
                      "would rewrite that name in the kernel and in every header the compiler "
                      "reads, so every candidate would be a compile_error: rename the "
                      f"{'define' if '.defines.' in where else 'param'}, e.g. to "
                      f"{macros.free_name(k, set(taken) | {n for _, n in fields}, sig.name)}")


# the pip distribution that installs a package, for the message when it is missing
PIP_NAMES = {"cutlass_library": "nvidia-cutlass"}


def include_dir(entry: str, root: Path) -> Path:
    """The absolute folder an ``include_dirs`` entry names: a path relative to the sweep
    folder ``root`` (or absolute), or ``pkg:PACKAGE/SUB/PATH``, the folder SUB/PATH inside
    the installed Python package PACKAGE (found with importlib.util.find_spec, which
    imports nothing), e.g. ``pkg:cutlass_library/source/include`` for the CUTLASS headers
    of ``pip install nvidia-cutlass``. Resolved where the spec loads: every node that builds
    must have the package at the same path (one machine, or the same environment).

    Raises:
        ValueError: the package is not installed (the message names it and the pip
            command), or it has no such folder.
    """
    if not entry.startswith("pkg:"):
        try:
            return resolved(root / entry)
        except OSError as e:
            raise ValueError(f"{entry!r}: {e.strerror}; name a folder") from None
    pkg, _, sub = entry[4:].strip("/").partition("/")
    try:
        found = importlib.util.find_spec(pkg) if pkg.isidentifier() else None
    except (ImportError, ValueError):
        found = None
    if found is None:
        pip = PIP_NAMES.get(pkg)
        how = f"pip install {pip}" if pip else "pip install the distribution that provides it"
        raise ValueError(f"{entry!r} names the Python package {pkg!r}, which is not installed "
                         f"here: {how}")
    base = (Path(found.submodule_search_locations[0]) if found.submodule_search_locations
            else Path(str(found.origin)).parent)
    path = resolved(base / sub)
    if not path.is_dir():
        raise ValueError(f"{entry!r}: the package {pkg!r} (at {base}) has no folder {sub!r}; "
                         "name a folder inside it")
    return path


def _check_include_dirs(dirs: list[str], paths: list[str], prefix: str, err: Any) -> None:
    """Raise ``err`` (a SpecError) for an ``include_dirs`` entry (as written, ``dirs``;
    resolved, ``paths``) that is not a folder: the compiler would ignore it, and a header
    that should come from it would be found elsewhere or not at all."""
    for i, (d, path) in enumerate(zip(dirs, paths)):
        p = Path(path)
        try:
            ok, what = p.is_dir(), "a file" if p.exists() else "missing"
        except (OSError, ValueError) as e:
            ok, what = False, f"unusable ({e})"
        if not ok:
            raise err(f"{prefix}include_dirs[{i}]", f"{d!r} ({p.absolute()}) is {what}, not a "
                      "folder; give an existing folder (relative paths are from the sweep "
                      "folder) or drop the entry")


def _scope(blk: BackendBlock, dims: list[dict[str, int]], scalars: dict[str, float | int]
           ) -> dict[str, str]:
    """Every name a block's expressions may use -> what it is (for messages)."""
    names = {k: "scalar" for k in scalars}
    names |= {k: "dim" for d in dims for k in d}
    for mid, real in blk.methods.items():
        names |= {k: f"define of methods.{mid}" for k in real.defines}
        names |= {k: f"param of methods.{mid}" for k in real.params}
    return names | {k: "param" for k in blk.params}


def _uses(derived: dict[str, Any], start: str, target: str) -> bool:
    """Whether derived ``start`` uses ``target``, directly or through other derived names."""
    seen, todo = set(), [start]
    while todo:
        n = todo.pop()
        if n in seen or n not in derived:
            continue
        seen.add(n)
        try:
            names = parse(str(derived[n])).names
        except ExprError:
            continue
        if target in names:
            return True
        todo += names
    return False


def _check_derived(derived: dict[str, Any], scope: dict[str, str], prefix: str, err: Any
                   ) -> dict[str, str]:
    """Validate a block's ``derived:`` (in order) and return name -> expression with the
    derived names before it inlined. SpecError, at ``derived.NAME``, for a name that is no
    identifier or shadows a param/method param/define/dim/scalar, an expression that does
    not parse, a name it uses that is unknown, itself, below it or in a cycle."""
    out: dict[str, str] = {}
    for name, value in derived.items():
        where = f"{prefix}derived.{name}"
        if not name.isidentifier() or keyword.iskeyword(name) or name in _FUNCS:
            raise err(where, f"{name!r} cannot be named in an expression; use letters, digits "
                      "and _ (not starting with a digit), and neither a Python keyword nor "
                      "min/max/abs")
        if name in scope:
            raise err(where, f"{name!r} is already a {scope[name]}; a derived name may not "
                      "shadow it: rename the derived quantity")
        text = value if isinstance(value, str) else str(value)
        try:
            names = parse(text).names
        except ExprError as ex:
            raise err(where, f"{ex}; write one expression over params, method params/defines, "
                      "dims, scalars and the derived names above it") from None
        if name in names:
            raise err(where, f"{text!r} uses {name!r} itself; define it over other names")
        for n in sorted(names & derived.keys() - out.keys()):
            if _uses(derived, n, name):
                raise err(where, f"{text!r} uses {n!r}, and derived.{n} uses {name!r}: a "
                          "cycle; define one of them without the other")
            raise err(where, f"{text!r} uses {n!r}, which is defined below it: move "
                      f"derived.{n} above derived.{name} (derived names are evaluated in order)")
        unknown = sorted(names - scope.keys() - out.keys())
        if unknown:
            close = difflib.get_close_matches(unknown[0], [*scope, *out], n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise err(where, f"{text!r} names {unknown}, which are neither params, method "
                      "params/defines, dims, scalars nor derived names above it" + hint)
        out[name] = inline(text, out)
        try:
            parse(out[name])
        except ExprError as ex:
            raise err(where, f"with the derived names it uses inlined: {ex}; name fewer "
                      "nested quantities") from None
    return out


def _inlined(text: str, derived: dict[str, str], where: str, err: Any) -> str:
    """``text`` with ``derived`` inlined, SpecError at ``where`` when the result is too long."""
    out = inline(text, derived)
    try:
        parse(out)
    except ExprError as ex:
        raise err(where, f"with its derived names inlined: {ex}; use fewer derived names "
                  "or shorter ones") from None
    return out


def launch_entries(launch: Launch) -> list[tuple[str, str | int]]:
    """(field name, value) of every geometry entry: ``block[0]`` ..., ``grid[0]`` ...,
    ``smem_bytes``."""
    return ([(f"block[{i}]", v) for i, v in enumerate(launch.block)]
            + [(f"grid[{i}]", v) for i, v in enumerate(launch.grid)]
            + [("smem_bytes", launch.smem_bytes)])


def _check_launch(launch: Launch, prefix: str, params: dict[str, list[Scalar]],
                  baseline: dict[str, Scalar], dims: list[dict[str, int]],
                  scalars: dict[str, float | int], err: Any, derived: dict[str, str]
                  ) -> Launch:
    """Each geometry expression parses, names only params/dims/scalars (directly or through
    derived names) and gives valid integers for the baseline at every problem size.
    Returns the launch with its derived names inlined: what builds carry to the node."""
    known = set(params) | {k for d in dims for k in d} | set(scalars)
    entries = {}
    for fname, v in launch_entries(launch):
        where = f"{prefix}launch.{fname}"
        if isinstance(v, int):
            continue
        try:
            e = parse(v)
        except ExprError as ex:
            raise err(where, str(ex)) from None
        entries[fname] = text = _inlined(v, derived, where, err)
        unknown = sorted(parse(text).names - known)
        if unknown:
            via = sorted(e.names & derived.keys())
            raise err(where, f"{v!r} names {unknown}"
                      + (f" through its derived names ({', '.join(via)})" if via else "")
                      + ", which are not launch params, dims or scalars (a method's params "
                      "exist only for some candidates: make a name the geometry needs a launch "
                      "param under `params:`)")
    launch = launch.model_copy(update={
        "block": [entries.get(f"block[{i}]", v) for i, v in enumerate(launch.block)],
        "grid": [entries.get(f"grid[{i}]", v) for i, v in enumerate(launch.grid)],
        "smem_bytes": entries.get("smem_bytes", launch.smem_bytes)})
    for i, d in enumerate(dims):
        env = {**scalars, **d, **baseline}
        for fname, v in launch_entries(launch):
            if isinstance(v, str):
                try:
                    parse(v)(env)
                except ExprError as ex:
                    raise err(f"{prefix}launch.{fname}", f"cannot evaluate for the baseline "
                              f"{baseline} at dims[{i}] {d}: {ex}; rewrite it with smaller "
                              "operands") from None
                except (KeyError, ZeroDivisionError):
                    pass  # launch_geometry below names these
        try:
            geo = launch_geometry(launch, env)
        except ValueError as ex:
            raise err(f"{prefix}launch", f"for the baseline {baseline} at dims[{i}] {d}: {ex}"
                      ) from None
        threads = geo["block"][0] * geo["block"][1] * geo["block"][2]
        if threads > 1024:
            raise err(f"{prefix}launch.block", f"the baseline's block {geo['block']} has "
                      f"{threads} threads at dims[{i}]; CUDA allows at most 1024 per block")
    return launch


def launch_geometry(launch: Launch | dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """:func:`workers.launch_geometry.launch_geometry` of a :class:`Launch` or its
    ``model_dump()``: ``{"grid": [x, y, z], "block": [x, y, z], "smem_bytes": n}`` (blocks,
    threads per block, bytes).

    Raises:
        ValueError: as that function (an unknown name, a division by zero, a value that is
            not an integer >= 1, or >= 0 for smem_bytes).
    """
    return evaluate_launch(launch if isinstance(launch, dict) else launch.model_dump(), env)


Backend = Literal["cuda", "cpu"]
