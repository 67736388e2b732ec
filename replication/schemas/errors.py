"""The registry's refusals, each with Confluent's error code (`error_code`, what
confluent-kafka's SchemaRegistryError carries) beside the HTTP status."""

from __future__ import annotations

import errno as _errno

from replication.errors import InvalidInput, NotFound, StreamgateError


class SubjectNotFound(NotFound):
    error_code = 40401


class VersionNotFound(NotFound):
    error_code = 40402


class SchemaNotFound(NotFound):
    error_code = 40403


class SubjectSoftDeleted(NotFound):
    error_code = 40404


class SubjectNotSoftDeleted(NotFound):
    error_code = 40405


class VersionSoftDeleted(NotFound):
    error_code = 40406


class VersionNotSoftDeleted(NotFound):
    error_code = 40407


class SubjectConfigNotFound(NotFound):
    error_code = 40408


class SubjectModeNotFound(NotFound):
    error_code = 40409


class IncompatibleSchema(StreamgateError, errno=_errno.EEXIST, http_status=409):
    error_code = 409


class InvalidSchema(InvalidInput, http_status=422):
    error_code = 42201


class InvalidVersion(InvalidInput, http_status=422):
    error_code = 42202


class InvalidCompatibility(InvalidInput, http_status=422):
    error_code = 42203


class InvalidMode(InvalidInput, http_status=422):
    error_code = 42204


class ReadOnlyMode(StreamgateError, errno=_errno.EROFS, http_status=422):
    error_code = 42205
