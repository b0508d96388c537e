"""Every encoding family's wiring: importing this package registers each family's spec class and artifact kinds."""

from ropeexport.families import rope  # noqa: F401
from ropeexport.families import alibi  # noqa: F401
