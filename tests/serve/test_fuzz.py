"""Schema-driven fuzzing of the HTTP API (schemathesis on the app's own OpenAPI schema), in-process:
generated bodies, valid and invalid, for every operation; no 5xx, every status documented, every
response matching its schema, invalid data refused. Bounded: 15 examples per operation and mode."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode, checks

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
]
# positive_data_acceptance is left out on purpose: a schema-valid text may still be refused (no tokens
# after preprocessing, longer than the model's max_len), which a JSON schema cannot express.


@pytest.fixture(scope="module")
def api_schema(translator):
    from attnlab.serve.app import create_app

    # The ASGI client raises server exceptions: a bug fails the example with its traceback.
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(translator, workers=1, max_wait_ms=0))


def test_schema_lists_every_route(api_schema):
    ops = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert {
        ("POST", "/api/explain"),
        ("POST", "/api/translations"),
        ("GET", "/api/model"),
        ("GET", "/healthz"),
    } <= ops


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_fuzz(api_schema, mode):
    for result in api_schema.get_all_operations():
        op = result.ok()
        if mode is GenerationMode.NEGATIVE and op.method.upper() == "GET":
            continue  # no parameters or body: nothing can be invalid

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def fuzz(case):
            case.call_and_validate(checks=CHECKS)

        fuzz()
