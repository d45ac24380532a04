"""``polyfs info`` and ``polyfs create``.

``info`` reads only JSON objects and listings: a dataset's chunk count and
stored bytes come from the chunk index (one listing), its codec from the
catalog's effective pipeline (declared filters corrected by a 16-byte sniff
of one chunk). Chunk data is never read.

The ``views`` line says, per view, whether the stored chunks are served as
they are ("zero-copy") or transcoded, by the rules of DESIGN.md sections 1-3
and the translation table: N5 needs numeric big-endian data and a single N5
compression; TIFF needs 2-D+ numeric chunks one plane deep with tiles that
are multiples of 16 and deflate/zstd/none; Zarr and HDF5 express every
codec of the table (Zarr's gzip is spliced from the zlib stream).
"""
from __future__ import annotations

from .codecs.pipeline import Pipeline
from .codecs.registry import BLOSC, BZIP2, DEFLATE, ZSTD
from .errors import NotFound, PolyfsError
from .formats import formats
from .model import keys
from .model import types as T
from .model.catalog import Catalog
from .model.schema import Dataset, Datatype, Group
from .model.tree import DomainModel
from .model.writer import DomainWriter
from .store import open_store


def create_domain(store_url: str, domain: str, owner: str = "admin") -> str:
    """An empty domain (a root group only); AlreadyExists if the path is taken, or if the
    domain would hide another in the mount's views (see ``views.root.view_conflict``)."""
    from .importers import check_owner, check_store_path, refuse_view_conflict

    check_owner(owner)
    check_store_path(str(store_url))
    store = open_store(str(store_url), create=True)
    catalog = Catalog(store)
    refuse_view_conflict(catalog, keys.normalize_domain(domain))
    writer = DomainWriter(catalog, domain, owner=owner)
    writer.commit()
    return writer.path


def info_text(store_url: str, domain: str | None = None) -> str:
    from .importers import check_store_path

    check_store_path(str(store_url))  # a file named as the store: not "does not exist"
    store = open_store(str(store_url), read_only=True)
    catalog = Catalog(store)
    if domain is None:
        domains, folders = catalog.list_tree()
        # a .domain.json that does not parse is neither: named, so it is not silently missing
        damaged = sorted(set(catalog.list_domains(include_folders=True)) - set(domains) - set(folders))
        lines = [d + "\n" for d in domains]
        lines += [f"{d}  (unreadable .domain.json; see 'polyfs check')\n" for d in damaged]
        return "".join(lines) or f"no domains in {store.url}\n"
    path = keys.normalize_domain(domain)
    try:
        model = catalog.load(path)
    except NotFound:
        inside = domains_under(catalog, path)
        if not inside:
            raise
        return "".join(d + "\n" for d in inside)  # a folder: its domains, as without a domain
    return "\n".join(_domain_lines(catalog, model)) + "\n"


def domains_under(catalog: Catalog, folder: str) -> list[str]:
    """The domains inside folder ``folder`` (a normalized path), at any depth."""
    return [d for d in catalog.list_domains() if d.startswith(folder.rstrip("/") + "/")]


# -- text -----------------------------------------------------------------------------
def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def type_text(t: T.DType) -> str:
    if isinstance(t, T.Committed):
        return f"{type_text(t.type)} (committed {t.id})"
    if isinstance(t, T.IntType):
        plain = t.precision is None and not t.offset
        return t.base if plain else f"{t.base} ({t.bits}-bit precision at bit {t.offset})"
    if isinstance(t, T.FloatType):
        return t.base if t.layout is None else f"{t.base} ({t.layout.precision}-bit precision)"
    if isinstance(t, T.TimeType):
        return t.base
    if isinstance(t, T.EnumType):
        if t.is_bool:
            return "bool"
        return f"enum {t.base.base} {{{', '.join(f'{n}={v}' for n, v in t.members)}}}"
    if isinstance(t, T.StringType):
        length = "variable" if t.length is None else str(t.length)
        return f"string({length}, {t.charset}, {t.pad})"
    if isinstance(t, T.CompoundType):
        return "compound {" + ", ".join(f"{n}: {type_text(ft)}" for n, ft in t.fields) + "}"
    if isinstance(t, T.ArrayType):
        return f"array{list(t.dims)} of {type_text(t.base)}"
    if isinstance(t, T.ReferenceType):
        return f"reference({t.kind})"
    if isinstance(t, T.OpaqueType):
        return f"opaque({t.size}{', ' + t.tag if t.tag else ''})"
    if isinstance(t, T.VlenType):
        return f"vlen of {type_text(t.base)}"
    return type(t).__name__  # pragma: no cover


def codec_text(p: Pipeline) -> str:
    if p.is_identity:
        return "none"
    parts = []
    for f in p.filters:
        if f.id in (DEFLATE, ZSTD, BZIP2):
            parts.append(f"{f.name}({f.cd_values[0]})" if f.cd_values else f.name)
        elif f.id == BLOSC:
            b = f.blosc
            parts.append(f"blosc({b['cname']}, {b['clevel']}, shuffle={b['shuffle']})")
        elif not f.known:  # opaque: carried as stored, with its parameters
            parts.append(f"{f.name}{list(f.cd_values) if f.cd_values else ''}")
        else:
            parts.append(f.name)
    return "+".join(parts)


def views_text(ds: Dataset, p: Pipeline) -> str:
    """Per view, how it serves the dataset: each format's own rule (``view.describe``)."""
    out = []
    for fmt in formats():
        describe = getattr(fmt.view(), "describe", None)
        if describe is not None:
            out.append(f"{fmt.name} {describe(ds, p)}")
    return ", ".join(out)


def _attrs_line(obj) -> str | None:
    if not obj.attributes:
        return None
    return "    attrs   " + ", ".join(sorted(obj.attributes))


def _domain_lines(catalog: Catalog, model: DomainModel) -> list[str]:
    d = model.domain
    lines = [f"domain {d.path}  owner {d.owner}  root {d.root or '-'}  "
             f"({len(model.groups)} groups, {len(model.datasets)} datasets, {len(model.datatypes)} types)"]
    if not d.root:
        lines.append("(a folder: no root group)")
        return lines
    total_bytes = 0
    total_chunks = 0
    for e in model.walk():
        obj = e.obj
        if isinstance(obj, Group):
            lines.append(f"{e.path}  group  {obj.id}")
        elif isinstance(obj, Datatype):
            lines.append(f"{e.path}  datatype  {type_text(obj.type)}")
        else:
            lines.extend(_dataset_lines(catalog, e.path, obj))
            try:
                idx = catalog.chunk_index(obj)
                total_bytes += idx.total_bytes
                total_chunks += len(idx)
            except PolyfsError:
                pass
        attrs = _attrs_line(obj)
        if attrs:
            lines.append(attrs)
    for gpath, link in model.aliases():
        where = ("" if gpath == "/" else gpath) + "/" + link.name
        if link.kind == "soft":
            lines.append(f"{where} -> {link.h5path}  soft link")
        elif link.kind == "external":
            lines.append(f"{where} -> {link.domain}:{link.h5path}  external link")
        else:
            try:
                target = model.canonical_paths().get(link.id, link.id)
            except PolyfsError:
                target = link.id
            lines.append(f"{where} -> {target}  hard link")
    lines.append(f"total  {total_chunks} chunks, {human_bytes(total_bytes)} stored")
    return lines


def _dataset_lines(catalog: Catalog, path: str, ds: Dataset) -> list[str]:
    lines = [f"{path}  dataset  {ds.id}", f"    type    {type_text(ds.type)}"]
    shape = ds.shape
    if shape.kind == "simple":
        text = str(list(shape.dims))
        if shape.maxdims is not None:
            text += "  max [" + ", ".join("unlimited" if m is None else str(m) for m in shape.maxdims) + "]"
    else:
        text = shape.kind
    lines.append(f"    shape   {text}")
    if ds.chunks:
        lines.append(f"    chunks  {list(ds.chunks)}  grid {list(ds.grid)}  ({ds.layout_class})")
    try:
        p = catalog.pipeline(ds)
        declared = catalog.declared_pipeline(ds)
        codec = codec_text(p)
        if p.ids != declared.ids:
            codec += f"  (declared {codec_text(declared)})"
        lines.append(f"    codec   {codec}")
        idx = catalog.chunk_index(ds)
        n = ds.nchunks if shape.size else 0
        stored = idx.total_bytes
        raw = len(idx) * ds.chunk_nbytes if not ds.type.is_vlen else 0
        ratio = f"  ({stored / raw:.2f} of decoded)" if raw else ""
        lines.append(f"    stored  {len(idx)}/{n} chunks, {human_bytes(stored)}{ratio}")
        lines.append(f"    views   {views_text(ds, p)}")
    except PolyfsError as exc:
        lines.append(f"    error   {' '.join(str(exc).split())}")
    if ds.fill_value is not None:
        lines.append(f"    fill    {ds.fill_value!r}")
    return lines


__all__ = ["create_domain", "info_text", "human_bytes", "type_text", "codec_text", "views_text"]
