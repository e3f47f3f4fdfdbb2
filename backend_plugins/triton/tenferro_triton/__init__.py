"""tenferro-triton: a code generator for the torch backend's devices (DESIGN.md section 11).

`compile` runs graphs on ``torch:cuda:N`` with Triton kernels generated for fused
elementwise groups, row reductions with their producers and consumers, and matmul; every
other node runs its torch kernel. On CPU the kernels run under ``TRITON_INTERPRET=1``
(``compile(f, backend="triton")``), which is how they are tested. Importing this package
does not import triton.
"""
