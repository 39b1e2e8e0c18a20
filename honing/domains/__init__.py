"""The built-in domains, one module each; importing this package registers them all.

    code    honing.domains.code    write or repair Python functions against tests
    finance honing.domains.finance multi-document financial analysis, with cited figures
    math    honing.domains.math    arithmetic and competition math, with a calculator
    tools   honing.domains.tools   function calling, judged by BFCL's rules
    sql     honing.domains.sql     questions about tables, answered with DuckDB
    structure honing.domains.structure  3D parts and scenes, rendered and checked geometrically

A domain module declares its task model, environment, reference check, generators, built-in
sets and warm-start trace plan in one `honing.tasks.domains.register(Domain(...))`; `base` has
the default reference check (`play_references`). docs/envs.md, "Add a domain", walks through it.
"""

from honing.domains import code, finance, math, sql, structure, tools
from honing.domains.base import play_references

__all__ = ["code", "finance", "math", "play_references", "sql", "structure", "tools"]
