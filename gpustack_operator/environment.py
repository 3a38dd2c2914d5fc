"""``GPUSTACK_*`` environment settings, read here and passed to the (pure) domain.

The configuration layer of the CLI: pydantic-settings reads the variables (docs/devices.md,
docs/configuration.md), the domain's functions turn the raw values into its objects. Every
loader takes an optional mapping instead of ``os.environ`` so tests, ``plan`` and the
simulator can pass their own. Invalid values raise ``ValueError`` naming the variable.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from pydantic import AliasChoices, BaseModel, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from gpustack_operator.domain.manufacturers import (
    ENV_PREFIX,
    KNOWN_MANUFACTURERS,
    OVERRIDE_FIELDS,
    Manufacturer,
    env_var_name,
    manufacturers_with_overrides,
    parse_pci_class_prefixes,
)

_M = TypeVar("_M", bound=BaseModel)
GROUP_ID_WITH_MEMORY_VARS: Final = (
    "GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY",
    "GPUSTACK_DEVICES_DETECT_GROUP_ID_WITH_MEMORY",
)

# The environment the next settings construction reads instead of os.environ (None: os.environ).
_ENV: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "gpustack_domain_env", default=None
)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' env source, reading a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = {k.lower(): v for k, v in env.items() if v != ""}
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return self._mapping


class _EnvBacked(BaseSettings):
    """Base of the domain's settings: ``GPUSTACK_`` prefix, empty values count as unset."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", case_sensitive=False, env_ignore_empty=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _ENV.get()
        if env is None:
            return (init_settings, env_settings)
        return (init_settings, _MappingEnvSource(settings_cls, env))


class DeviceSettings(_EnvBacked):
    """Settings shared by the worker and the device manager."""

    pci_class_prefixes: str = "02,03,0b,12"
    devices_group_id_with_memory: bool = Field(
        default=False, validation_alias=AliasChoices(*GROUP_ID_WITH_MEMORY_VARS)
    )


MANUFACTURER_OVERRIDE_FIELDS: Final = OVERRIDE_FIELDS


def manufacturer_settings_model(names: tuple[str, ...]) -> type[BaseModel]:
    """A settings class with one optional field per ``GPUSTACK_<MFR>_<OVERRIDE>`` variable."""
    fields: dict[str, Any] = {
        f"{name}_{field}": (str | None, FieldInfo(default=None))
        for name in names
        for field in MANUFACTURER_OVERRIDE_FIELDS
    }
    model: type[BaseModel] = create_model("ManufacturerOverrides", __base__=_EnvBacked, **fields)
    return model


@contextmanager
def _reading(env: Mapping[str, str] | None) -> Iterator[None]:
    token = _ENV.set(env)
    try:
        yield
    finally:
        _ENV.reset(token)


def build_settings(model: type[_M], env: Mapping[str, str] | None) -> _M:
    """Construct *model* from *env* (``None``: ``os.environ``); errors name the variable."""
    with _reading(env):
        try:
            return model()
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else "?"
                var = field if field.startswith(ENV_PREFIX) else env_var_name(field)
                problems.append(f"{var}: {err['msg']} (got {err.get('input')!r})")
            raise ValueError("invalid environment: " + "; ".join(problems)) from None


def load_device_settings(env: Mapping[str, str] | None = None) -> DeviceSettings:
    """``GPUSTACK_PCI_CLASS_PREFIXES`` and ``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY``."""
    return build_settings(DeviceSettings, env)


def load_group_id_with_memory(env: Mapping[str, str] | None = None) -> bool:
    """Whether group IDs carry ``-<mem>g`` (``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY``)."""
    return load_device_settings(env).devices_group_id_with_memory


_OverridesModel = manufacturer_settings_model(KNOWN_MANUFACTURERS)


def load_manufacturers(env: Mapping[str, str] | None = None) -> dict[str, Manufacturer]:
    """The nine manufacturers with ``GPUSTACK_<MFR>_*`` overrides applied, sorted by name.

    *env* ``None`` reads ``os.environ``. Empty variables count as unset. A bad value raises
    ``ValueError`` naming the variable.
    """
    return manufacturers_with_overrides(build_settings(_OverridesModel, env).model_dump())


def load_pci_class_prefixes(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``GPUSTACK_PCI_CLASS_PREFIXES`` as lower-case hex prefixes (default 02,03,0b,12)."""
    return parse_pci_class_prefixes(load_device_settings(env).pci_class_prefixes)
