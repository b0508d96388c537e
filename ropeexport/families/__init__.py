"""Every encoding family's wiring: importing this package registers each family's spec class and artifact kinds."""

from ropeexport.families import (
    alibi,  # noqa: F401
    kerple,  # noqa: F401
    rope,  # noqa: F401
    sandwich,  # noqa: F401
    shaw,  # noqa: F401
    sinusoidal,  # noqa: F401
    t5,  # noqa: F401
    transformer_xl,  # noqa: F401
    tupe,  # noqa: F401
)
