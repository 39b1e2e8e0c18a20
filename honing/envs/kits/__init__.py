"""Tools that several domains give their models, each run the same way wherever it is offered.

    calculator  `calculate(pool, expression)`: exact arithmetic in the sandbox (math, tools,
                finance)
    answers     `stated_answer(text)`: the answer a plain reply states (a boxed value or an
                `Answer:` line)

Not covered: a domain's own tools (its environment), and the judges (each domain's `judge`).
"""
