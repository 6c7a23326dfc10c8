"""Sequences whose items are made when they are asked for (the plan's panels and tiles).

A plan of millions of panels or tiles lists none of them: :class:`LazySequence` is what
:class:`outofcore.planner.plan.Panels` and :class:`outofcore.planner.tiles.Tiles` share.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, TypeVar

Item = TypeVar("Item")


class LazySequence(Sequence[Item]):
    """What :class:`Panels` and :class:`Tiles` share: items made when they are asked for,
    equal to a tuple of the same items and to a sequence of their kind with the same
    :meth:`_identity`, hashed by it and pickled by their constructor's arguments."""

    __slots__ = ()
    #: What an item is called in an IndexError.
    noun = "item"

    def _identity(self) -> tuple:
        """What fixes every item (equal identities: equal sequences)."""
        raise NotImplementedError

    def _arguments(self) -> tuple:
        """The constructor's arguments (pickling)."""
        raise NotImplementedError

    def _item_of(self, value: Any) -> Any:
        """``value`` of a tuple or list as an item, to compare (the same by default)."""
        return value

    def _position(self, index: Any) -> int:
        """``index`` as a position in ``range(len(self))`` (negative from the end)."""
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"{self.noun} {index} of {len(self)}")
        return position

    def __contains__(self, value: object) -> bool:
        try:
            self.index(value)
        except ValueError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return self._identity() == other._identity()
        if isinstance(other, tuple | list):
            return len(self) == len(other) and all(
                mine == self._item_of(theirs) for mine, theirs in zip(self, other, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._identity())

    def __reduce__(self) -> tuple:
        return (type(self), self._arguments())
