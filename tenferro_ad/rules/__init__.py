"""AD rule tables for the core catalog, keyed by primitive name.

Each module exports `JVP` and `TRANSPOSE` dicts; `tenferro_ad.plugin` registers
them through the `tenferro_register` hook, as any extension does.
"""
