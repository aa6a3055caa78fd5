"""Code generation: a graph as LLVM IR (through llvmlite), then machine code.

The target-neutral core is :mod:`.llvm` (the walk and its op -> emitter table) with its parts
(:mod:`.arithmetic`, :mod:`.numerics`, :mod:`.memory_access`, :mod:`.loops`), the types of
:mod:`.llvm_types`, fp8 in :mod:`.minifloat` and the kernel ABI in :mod:`.abi`; one package per
target adds its own (:mod:`.host`, :mod:`.nvptx`); :mod:`.machine` turns a module into PTX text
or host machine code and names each target's code generator (``EMITTERS``).
"""
