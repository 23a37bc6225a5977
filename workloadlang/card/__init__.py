"""The cache card of `wl probe`: its contract (`model`), its terminal text (`render`) and the
comparison of two cards (`compare`). Nothing here imports the runner."""

from workloadlang.card.contract import (
                                     PROPERTIES,
                                     SCHEMA,
                                     Card,
                                     CardFileError,
                                     Cost,
                                     Experiment,
                                     Property,
                                     card_of,
                                     read_card,
)

__all__ = ["PROPERTIES", "SCHEMA", "Card", "CardFileError", "Cost", "Experiment", "Property",
           "card_of", "read_card"]
