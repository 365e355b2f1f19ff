#!/usr/bin/env python3
"""The flags of Megatron-LM's own argument parser, as a cross-check of extract_flags.py.

Usage: python3.12 parser_flags.py DIR    (DIR: a Megatron-LM tree, e.g. from
       `git -C MIRROR archive REF megatron | tar -x -C DIR`)

Imports DIR's megatron/training/arguments.py with the third-party modules that Megatron's training
code needs (torch, Transformer Engine, ...: STUBBED below) replaced by permissive stubs, builds the
parser with add_megatron_arguments() (before core_r0.12.0: parse_args(), stopped at its parse), and
prints every '--' option string, one a line, argparse's --help included. A developer's check, not
run by the tests: it needs Python 3.12 or later (Megatron-LM's newer sources import
typing.override), and the flags that Megatron adds only when an optional library is installed (the
Kitchen flags) are missing, since the stubs say the library is not there.
"""
import argparse
import importlib.abc
import importlib.machinery
import sys
import types
import typing


class Dummy:
    """Any value: callable, indexable, comparable, iterable (empty), false."""
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return Dummy()
    def __getattr__(self, n):
        if n.startswith('__') and n.endswith('__'):
            raise AttributeError(n)
        return Dummy()
    def __mro_entries__(self, bases): return (object,)
    def __iter__(self): return iter(())
    def __bool__(self): return False
    def __or__(self, o): return Dummy()
    __ror__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __or__
    def __getitem__(self, k): return Dummy()
    def __lt__(self, o): return False
    __gt__ = __le__ = __ge__ = __lt__
    def __eq__(self, o): return self is o
    def __hash__(self): return id(self)
    def __int__(self): return 0
    __index__ = __int__
    def __float__(self): return 0.0
    def __str__(self): return "0.0.0"


class StubMeta(typing._ProtocolMeta):  # a subclass of Protocol's and ABC's metaclasses: any base mixes
    def __getattr__(cls, n):
        if n.startswith('__'):
            raise AttributeError(n)
        return Dummy()
    def __getitem__(cls, k): return cls


def _stub_class(name):
    return StubMeta(name, (), {
        '__init_subclass__': classmethod(lambda c, **k: None), '__init__': lambda s, *a, **k: None,
        '__getattr__': lambda s, k: Dummy(), '__class_getitem__': classmethod(lambda c, k: c),
        '__lt__': lambda s, o: False, '__le__': lambda s, o: True, '__gt__': lambda s, o: False,
        '__ge__': lambda s, o: True, '__call__': lambda s, *a, **k: Dummy(),
        '__iter__': lambda s: iter(()), '__bool__': lambda s: False})


class StubModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith('__'):
            raise AttributeError(n)
        if n == "load_inline":  # torch.utils.cpp_extension: building an extension fails
            def load_inline(*a, **k): raise ImportError("stub")
            return load_inline
        if n.endswith("_HOME"):  # CUDA_HOME and the like: a path
            return "/nonexistent"
        v = _stub_class(n) if n[:1].isupper() else Dummy()
        setattr(self, n, v)
        return v


# The modules stubbed: what Megatron-LM's training code imports unconditionally. Any other module
# that is not installed raises ImportError, as Megatron's optional imports expect.
STUBBED = {
    'torch', 'numpy', 'packaging', 'transformer_engine', 'einops', 'apex', 'flash_attn',
    'nvidia_resiliency_ext', 'wandb', 'tensorboard', 'yaml', 'tqdm', 'regex', 'sentencepiece', 'tiktoken',
    'transformers', 'mamba_ssm', 'causal_conv1d', 'triton', 'pynvml', 'psutil', 'onelogger', 'one_logger',
    'modelopt', 'nvtx', 'zarr', 'tensorstore', 'multistorageclient', 'opentelemetry', 'safetensors',
    'huggingface_hub', 'datasets', 'emerging_optimizers', 'deep_ep', 'hybrid_ep', 'nv_one_logger',
    'torch_memory_saver', 'cupy', 'numba', 'flashinfer', 'megatron_fsdp', 'pydantic', 'omegaconf', 'hydra',
    'nvidia', 'sklearn', 'scipy', 'jinja2', 'tokenizers', 'mistral_common', 'nltk', 'h5py', 'PIL',
    'torchvision', 'cuda', 'ml_dtypes', 'fla', 'tilelang', 'quack', 'six', 'pkg_resources', 'accelerate',
    'amp_C', 'fused_layer_norm_cuda', 'scaled_softmax_cuda', 'nvidia_modelopt', 'boto3', 'lightning', 'nemo',
    'typing_extensions', 'cutlass', 'vllm', 'flashattn_hopper', 'flash_attn_3', 'flash_mla', 'kitchen',
    'fast_hadamard_transform', 'wrapt',
}


class Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] not in STUBBED:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        m.__version__ = "99.0.0"
        return m

    def exec_module(self, m):
        pass


def main(root):
    sys.path.insert(0, root)
    sys.meta_path.insert(0, Stubs())
    import megatron.training.arguments as A
    if hasattr(A, 'add_megatron_arguments'):
        parser = A.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    else:
        class Got(Exception):
            pass
        def grab(self, *a, **k):
            raise Got(self)
        argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = grab
        try:
            A.parse_args()
            raise SystemExit("parse_args() did not parse")
        except Got as e:
            parser = e.args[0]
    for action in parser._actions:
        for o in action.option_strings:
            if o.startswith('--'):
                print(o)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1])
