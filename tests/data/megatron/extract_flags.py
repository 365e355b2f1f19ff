#!/usr/bin/env python3
"""List the command-line flags that Megatron-LM's argument parser accepts at a git ref.

Usage:
  extract_flags.py GITDIR REF             the flags at REF, one a line, in the order defined
  extract_flags.py --table GITDIR [LABEL=]REF...
        every flag of any REF with the refs it appears in (the format of all-flags.txt), header
        comments first; a ref is named LABEL, or refs/heads/X and refs/tags/X by X

GITDIR is a clone or bare mirror of github.com/NVIDIA/Megatron-LM; files are read with
`git -C GITDIR show REF:PATH`, nothing is imported or run (Python 3 standard library only).

The flags come from two places, both reached from parse_args() in
megatron/training/arguments.py (add_megatron_arguments() from core_r0.12.0 on):

1. Every string starting with '--' among the positional arguments of an add_argument() call in
   megatron/training/arguments.py. At every ref from core_r0.8.0 to HEAD (2026-08-22) all of them
   lie in the _add_*_args functions that parse_args() calls, and parse_args() pulls no
   add_argument() call from another module (its extra_args_provider is the caller's: pretrain_gpt.py
   passes megatron/post_training/arguments.py's add_modelopt_args only when nvidia-modelopt is
   installed; those flags are not listed). The script checks both facts and stops if either fails.
   An action=argparse.BooleanOptionalAction adds '--no-' + the flag's name after its '--' for
   each flag of the call (argparse's BooleanOptionalAction.__init__). Calls under `if` are
   counted (the Kitchen flags of _add_kitchen_quantization_arguments, there when the library is).

2. From core_r0.16.0 on, the dataclass flags: each `ArgumentGroupFactory(CLASS, exclude=LIST)`
   whose .build_group(parser, ...) arguments.py calls adds one argument per dataclass field.
   The rule, megatron/training/argument_utils.py, class ArgumentGroupFactory (the same at every
   ref that has it):
   - build_group(): for attr in dataclasses.fields(CLASS) (the fields of CLASS and of its
     dataclass bases, bases first, a field redefined keeping its place), skip a field whose name
     is in `exclude` or that has init=False (ClassVar, InitVar and KW_ONLY are no fields);
   - _build_argparse_kwargs_from_field(): arg_names = [_format_arg_name(name)], where
     _format_arg_name() turns 'a_b' into '--a-b' (every '_' a '-', the case kept);
     if _extract_type() of the annotation gives type bool (bool, Optional[bool], bool | None,
     Union[bool, None], a Literal of bools; a union counts as Optional only with None second), the
     action is store_true when `attribute.default == False` (default False or 0) and store_false
     otherwise (default True, None, a default_factory, no default), and a store_false field is
     named by two flags: ['--no-' + name, '--disable-' + name] (both kebab-cased);
   - then the field's metadata["argparse_meta"] dict updates the kwargs: an "arg_names" list there
     replaces the names entirely (use_nsys_profiler -> --profile; the bool rule's --no- and
     --disable- names are dropped too).
   The annotations are read as written (no module uses `from __future__ import annotations`,
   which would turn them into strings; the script stops if one does).

The script stops (exit 1) on anything it cannot read exactly: a non-literal flag, exclude list or
arg_names, an unresolved class, a default it cannot evaluate for a bool field.
"""
import ast
import subprocess
import sys

ARGS = "megatron/training/arguments.py"


class Fail(Exception):
    pass


class Repo:
    def __init__(self, gitdir, ref):
        self.gitdir, self.ref, self.cache = gitdir, ref, {}

    def read(self, path):
        if path not in self.cache:
            r = subprocess.run(["git", "-C", self.gitdir, "show", "%s:%s" % (self.ref, path)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.cache[path] = r.stdout.decode() if r.returncode == 0 else None
        return self.cache[path]

    def module(self, dotted):
        """(path, ast) of a module given as a dotted name."""
        base = dotted.replace(".", "/")
        for path in (base + ".py", base + "/__init__.py"):
            src = self.read(path)
            if src is not None:
                return path, ast.parse(src, path)
        raise Fail("%s: module %s not found" % (self.ref, dotted))


def resolve_from(path, node):
    """The absolute module name of an ImportFrom node in the file at path."""
    if node.level == 0:
        return node.module
    pkg = path.split("/")[:-1]  # the package the file is in (a/b/c.py and a/b/__init__.py: a.b)
    pkg = pkg[:len(pkg) - (node.level - 1)]
    return ".".join(pkg + ([node.module] if node.module else []))


def top_level(body):
    """The statements of a module body, those under top-level if/try blocks included."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            for b in (node.body, node.orelse, getattr(node, "finalbody", []),
                      *[h.body for h in getattr(node, "handlers", [])]):
                yield from top_level(b)


def find_class(repo, path, tree, name, scope=None, depth=0):
    """(path, tree, ClassDef) of the class `name` as seen from module tree (and, first, from the
    imports inside the function `scope`), following `from ... import` chains."""
    if depth > 20:
        raise Fail("%s: import loop looking for %s" % (repo.ref, name))
    imports = [n for n in ast.walk(scope) if isinstance(n, ast.ImportFrom)] if scope is not None else []
    for node in top_level(tree.body):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return path, tree, node
        if isinstance(node, ast.ImportFrom):
            imports.append(node)
    for node in imports:
        for a in node.names:
            if (a.asname or a.name) == name:
                mpath, mtree = repo.module(resolve_from(path, node))
                return find_class(repo, mpath, mtree, a.name, None, depth + 1)
    for node in imports:
        for a in node.names:
            if a.name == "*":
                try:
                    mpath, mtree = repo.module(resolve_from(path, node))
                    return find_class(repo, mpath, mtree, name, None, depth + 1)
                except Fail:
                    pass
    raise Fail("%s: class %s not found from %s" % (repo.ref, name, path))


def is_dataclass(cls):
    for d in cls.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if ast.unparse(f) in ("dataclass", "dataclasses.dataclass"):
            return True
    return False


def call_name(node):
    return ast.unparse(node.func) if isinstance(node, ast.Call) else None


def field_call(value):
    """The field(...) call of a field's assigned value, or None."""
    if isinstance(value, ast.Call) and call_name(value) in ("field", "dataclasses.field"):
        return value
    return None


def kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def dataclass_fields(repo, path, tree, cls, ref_for_errors):
    """dataclasses.fields() order: bases' fields first (last base first, as the MRO is walked in
    reverse), then this class's; a redefinition keeps the first place. Each field: (name,
    annotation, value node or None)."""
    if not is_dataclass(cls):
        return []
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
           any(a.name == "annotations" for a in n.names) for n in tree.body):
        raise Fail("%s: %s: from __future__ import annotations" % (ref_for_errors, path))
    fields = {}
    for base in reversed(cls.bases):
        bname = ast.unparse(base)
        if bname in ("object", "Generic") or bname.startswith(("Generic[", "typing.", "ABC", "abc.")):
            continue
        try:
            bpath, btree, bcls = find_class(repo, path, tree, bname.split(".")[-1])
        except Fail:
            raise Fail("%s: base %s of %s not found" % (ref_for_errors, bname, cls.name))
        for f in dataclass_fields(repo, bpath, btree, bcls, ref_for_errors):
            fields[f[0]] = f
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = ast.unparse(node.annotation)
        if ann.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")) or \
                ann in ("KW_ONLY", "dataclasses.KW_ONLY"):
            continue
        if isinstance(node.annotation, ast.Constant):
            raise Fail("%s: %s.%s has a string annotation" % (ref_for_errors, cls.name, node.target.id))
        fields[node.target.id] = (node.target.id, node.annotation, node.value)
    return list(fields.values())


def bool_type(ann):
    """Whether ArgumentGroupFactory._extract_type() gives type bool for this annotation."""
    s = ast.unparse(ann)
    if s == "bool":
        return True
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        # X | None: types.UnionType, args (X, NoneType); Optional only when None is second
        left, right = ann.left, ann.right
        if isinstance(left, ast.BinOp):  # X | Y | None has three args: args[1] is Y
            return False
        return ast.unparse(right) == "None" and bool_type(left)
    if isinstance(ann, ast.Subscript):
        head = ast.unparse(ann.value).split(".")[-1]
        args = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if head == "Optional":
            return bool_type(args[0])
        if head == "Union":
            return len(args) >= 2 and ast.unparse(args[1]) == "None" and bool_type(args[0])
        if head == "Literal":
            return all(isinstance(a, ast.Constant) and isinstance(a.value, bool) for a in args)
    return False


MISSING = object()


def default_of(value, where):
    """The field's default as a Python value, MISSING (no default or a default_factory)."""
    if value is None:
        return MISSING
    fc = field_call(value)
    if fc is not None:
        d = kw(fc, "default")
        if d is None:
            return MISSING
        value = d
    try:
        return ast.literal_eval(value)
    except ValueError:
        raise Fail("%s: cannot evaluate the default %s" % (where, ast.unparse(value)))


def argparse_meta_names(value, where):
    """The arg_names list of field(metadata={"argparse_meta": {...}}), or None."""
    fc = field_call(value)
    if fc is None:
        return None
    md = kw(fc, "metadata")
    if md is None:
        return None
    if not isinstance(md, ast.Dict):
        raise Fail("%s: metadata is not a dict literal: %s" % (where, ast.unparse(md)))
    for k, v in zip(md.keys, md.values):
        if k is None:
            raise Fail("%s: ** in metadata" % where)
        if isinstance(k, ast.Constant) and k.value == "argparse_meta":
            if not isinstance(v, ast.Dict):
                raise Fail("%s: argparse_meta is not a dict literal" % where)
            for k2, v2 in zip(v.keys, v.values):
                if k2 is None:
                    raise Fail("%s: ** in argparse_meta" % where)
                if isinstance(k2, ast.Constant) and k2.value == "action" and \
                        not (isinstance(v2, ast.Constant) and v2.value in ("store_true", "store_false")):
                    raise Fail("%s: argparse_meta action %s" % (where, ast.unparse(v2)))
                if isinstance(k2, ast.Constant) and k2.value == "arg_names":
                    names = ast.literal_eval(v2)
                    if not all(isinstance(n, str) for n in names):
                        raise Fail("%s: arg_names %r" % (where, names))
                    return list(names)
    return None


def factory_flags(repo, cls_info, exclude):
    path, tree, cls = cls_info
    out = []
    for name, ann, value in dataclass_fields(repo, path, tree, cls, repo.ref):
        where = "%s: %s.%s" % (repo.ref, cls.name, name)
        if name in exclude:
            continue
        fc = field_call(value) if value is not None else None
        if fc is not None and isinstance(kw(fc, "init"), ast.Constant) and kw(fc, "init").value is False:
            continue
        if fc is not None and kw(fc, "init") is not None and not isinstance(kw(fc, "init"), ast.Constant):
            raise Fail("%s: init=%s" % (where, ast.unparse(kw(fc, "init"))))
        names = ["--" + name.replace("_", "-")]
        if bool_type(ann):
            d = default_of(value, where)
            if d is MISSING or not (d == False):  # noqa: E712 (Megatron's own test)
                names = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
        meta = argparse_meta_names(value, where)
        if meta is not None:
            names = meta
        out.extend(names)
    return out


def literal_list(node, env, where):
    """Evaluate an exclude= expression: a list/tuple literal, a name bound in env, or a sum."""
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return []
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise Fail("%s: exclude name %s not bound" % (where, node.id))
        return literal_list(env[node.id], env, where)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal_list(node.left, env, where) + literal_list(node.right, env, where)
    try:
        v = ast.literal_eval(node)
    except ValueError:
        raise Fail("%s: cannot evaluate exclude %s" % (where, ast.unparse(node)))
    return list(v)


def flags_at(gitdir, ref):
    repo = Repo(gitdir, ref)
    src = repo.read(ARGS)
    if src is None:
        raise Fail("%s: no %s" % (ref, ARGS))
    tree = ast.parse(src, ARGS)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    # the functions reachable from parse_args()
    reach, todo = [], ["parse_args"]
    while todo:
        f = todo.pop(0)
        if f in reach or f not in funcs:
            continue
        reach.append(f)
        for n in ast.walk(funcs[f]):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                todo.append(n.func.id)
    module_env = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name)}
    flags = []
    for fname, fn in funcs.items():
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
        adds = [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument"]
        if adds and fname not in reach:
            raise Fail("%s: %s calls add_argument but parse_args does not reach it" % (ref, fname))
        if fname not in reach:
            continue
        # a call passing the parser or a group to a function that is not arguments.py's own
        for c in calls:
            f = ast.unparse(c.func)
            if f in ("extra_args_provider",) or f in funcs or f.endswith(("add_argument", "build_group",
                                                                          "add_argument_group",
                                                                          "add_mutually_exclusive_group",
                                                                          "set_defaults")):
                continue
            if any(isinstance(a, ast.Name) and ("parser" in a.id or "group" in a.id) for a in c.args):
                raise Fail("%s: %s passes the parser to %s" % (ref, fname, f))
        env = dict(module_env)
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        env[t.id] = n.value
        # factories: variable -> (class, exclude); built when .build_group is called on it
        factories = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and call_name(n.value) == "ArgumentGroupFactory":
                for t in n.targets:
                    factories[t.id] = n.value
        # walk the function's statements in source order, so the flags keep the parser's order
        events = []
        for c in calls:
            if isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument":
                for a in c.args:
                    if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                        raise Fail("%s: %s: add_argument(%s) is not literal" % (ref, fname, ast.unparse(a)))
                names = [a.value for a in c.args if a.value.startswith("--")]
                act = kw(c, "action")
                if act is not None and ast.unparse(act).split(".")[-1] == "BooleanOptionalAction":
                    names += ["--no-" + n[2:] for n in names]
                elif act is not None and not isinstance(act, ast.Constant):
                    raise Fail("%s: %s: action=%s" % (ref, fname, ast.unparse(act)))
                events.append((c.lineno, c.col_offset, names))
            elif isinstance(c.func, ast.Attribute) and c.func.attr == "build_group":
                obj = c.func.value
                fac = factories.get(obj.id) if isinstance(obj, ast.Name) else obj
                if call_name(fac) != "ArgumentGroupFactory":
                    raise Fail("%s: %s: build_group on %s" % (ref, fname, ast.unparse(obj)))
                if not isinstance(fac.args[0], ast.Name):
                    raise Fail("%s: factory of %s" % (ref, ast.unparse(fac.args[0])))
                where = "%s: %s" % (ref, fname)
                exclude = literal_list(kw(fac, "exclude") if len(fac.args) < 2 else fac.args[1], env, where)
                cls = find_class(repo, ARGS, tree, fac.args[0].id, fn)
                events.append((c.lineno, c.col_offset, factory_flags(repo, cls, set(exclude))))
        for _, _, fl in sorted(events, key=lambda e: (e[0], e[1])):
            flags.extend(fl)
    ordered = list(dict.fromkeys(flags))
    dup = len(flags) - len(ordered)
    if dup:
        raise Fail("%s: %d flags defined twice" % (ref, dup))
    return ordered


def commit_of(gitdir, ref):
    r = subprocess.run(["git", "-C", gitdir, "log", "-1", "--format=%H %cs", ref + "^{commit}", "--"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    return r.stdout.decode().split()


def label(ref):
    return ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else \
        ref[len("refs/tags/"):] if ref.startswith("refs/tags/") else ref


def table(gitdir, args):
    labels = [a.split("=", 1)[0] if "=" in a else label(a) for a in args]
    refs = [a.split("=", 1)[1] if "=" in a else a for a in args]
    per = [set(flags_at(gitdir, r)) for r in refs]
    allf = sorted(set().union(*per))
    out = ["# Every command-line flag that Megatron-LM's argument parser accepts at these refs of",
           "# github.com/NVIDIA/Megatron-LM (release branches' tips and main), made by",
           "# tests/data/megatron/extract_flags.py --table GITDIR LABEL=COMMIT... with the refs below",
           "# (add_argument() flags of megatron/training/arguments.py and the flags ArgumentGroupFactory",
           "# makes from config dataclasses; the rule is in the script's header; README.md says what",
           "# is left out).",
           "# Each line: FLAG REFS, REFS the refs it appears in: A..B a run of consecutive refs, runs",
           "# separated by commas. The refs in order, with their commits and commit dates:"]
    for r, lab, fl in zip(refs, labels, per):
        h, d = commit_of(gitdir, r)
        out.append("#   %-12s %s %s %4d flags" % (lab, h, d, len(fl)))
    out.append("# %d flags in all." % len(allf))
    for f in allf:
        idx = [i for i, s in enumerate(per) if f in s]
        runs, start = [], idx[0]
        for a, b in zip(idx, idx[1:] + [None]):
            if b != a + 1:
                runs.append(labels[start] if start == a else "%s..%s" % (labels[start], labels[a]))
                start = b
        out.append("%s %s" % (f, ",".join(runs)))
    return "\n".join(out) + "\n"


def main(argv):
    try:
        if argv[:1] == ["--table"] and len(argv) >= 3:
            sys.stdout.write(table(argv[1], argv[2:]))
        elif len(argv) == 2:
            for f in flags_at(argv[0], argv[1]):
                print(f)
        else:
            sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
            return 2
    except Fail as e:
        sys.stderr.write("extract_flags.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
