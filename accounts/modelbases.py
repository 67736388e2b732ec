"""Abstract model bases for the shapes several models share: listed and shown by one field
(tenants, clusters, streams), or named uniquely within a parent (gateways, topics). Each
call builds a base class; Django inherits an abstract base's Meta into models without one.
And choices spelled as maprcli spells them."""

from __future__ import annotations

from collections.abc import Callable

from django.db import models


def abstract_model(name: str, meta: dict, **attrs: object) -> type[models.Model]:
    """An abstract model class named `name` with Meta options `meta` and members `attrs`."""
    return type(name, (models.Model,), {
        "Meta": type("Meta", (), {"abstract": True, **meta}), "__module__": __name__, **attrs})


def shown_as(template: str) -> Callable[[models.Model], str]:
    """A model's __str__ from a format string over `self`: "{self.name}@{self.cluster.name}"."""

    def __str__(self: models.Model) -> str:
        return template.format(self=self)

    return __str__


def titled(field: str) -> type[models.Model]:
    """A base for models listed in `field` order and shown as their `field`."""
    return abstract_model(f"TitledBy_{field}", {"ordering": [field]},
                          __str__=shown_as(f"{{self.{field}}}"))


def named_within(parent: str, by: str, shown: str) -> type[models.Model]:
    """A base for models whose `name` is unique within their `parent` (constraint
    `<model>_name_per_<parent>`), listed by the parent's `by`, then name; `shown` as in
    shown_as()."""
    unique = models.UniqueConstraint(fields=[parent, "name"], name=f"%(class)s_name_per_{parent}")
    return abstract_model(f"NamedWithin_{parent}", {"ordering": [f"{parent}__{by}", "name"],
                                                    "constraints": [unique]},
                          __str__=shown_as(shown))


def lowercase_choices(name: str, members: str, module: str) -> type[models.TextChoices]:
    """TextChoices whose values are the members' names in lower case, as maprcli spells
    them (`Compression.LZ4 == "lz4"`)."""
    return models.TextChoices(name, [(m, m.lower()) for m in members.split()], module=module)
