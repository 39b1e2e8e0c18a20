"""The built-in domains, one package each; importing this package registers them all.

    code       write or repair Python functions against tests
    finance    multi-document financial analysis, with cited figures
    math       arithmetic and competition math, with a calculator
    sql        questions about tables, answered with DuckDB
    structure  3D parts and scenes, rendered and checked geometrically
    tools      function calling, judged by BFCL's rules

A domain package (`honing.domains.<name>`) declares its task model, environment, reference
check, generators, built-in sets, warm-start trace plan and team hooks in one
`honing.tasks.domains.register(Domain(...))`; `base` has the default reference check
(`play_references`). Nothing outside a domain's package imports it. docs/envs.md, "Add a
domain", walks through it.
"""

from honing.domains import code, finance, math, sql, structure, tools
from honing.domains.base import play_references

__all__ = ["code", "finance", "math", "play_references", "sql", "structure", "tools"]
