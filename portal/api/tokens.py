"""/api/v1/tokens/: your own API tokens, made, listed and revoked as on the account's Tokens
page, through the same service (replication/services/tokens.py): named, scoped (read,
produce, admin), with an expiry; the secret is in the answer that made it, once. A token
cannot make one wider (scope) or longer-lived (expiry) than itself; another user's token is
absent (404)."""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from knox.models import AuthToken
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import TokenScope
from portal.api.viewsets import TenantScopedViewSet
from replication.services.tokens import (
    MAX_NAME,
    expiry_from,
    token_create,
    token_revoke,
    tokens_of,
)


class TokenRowSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="the token's id (never its secret): revoke by it")
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=TokenScope.choices)
    created = serializers.DateTimeField()
    expiry = serializers.DateTimeField(allow_null=True, help_text="null: never expires")
    last_used = serializers.DateTimeField(allow_null=True)


class TokenMadeSerializer(TokenRowSerializer):
    token = serializers.CharField(help_text="the secret, shown this once: keep it now")


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=MAX_NAME, help_text="to tell it from the others")
    scope = serializers.ChoiceField(choices=TokenScope.choices, default=TokenScope.READ,
                                    help_text="read (consume, describe), produce (and commit "
                                              "offsets) or admin; at most your own token's")
    expires = serializers.CharField(default="90", help_text="days until it expires (1 to "
                                                            "3650), or never")
    expires_on = serializers.DateField(required=False, help_text="a date instead (YYYY-MM-DD, "
                                                                 "its end of day)")


@extend_schema_view(
    list=extend_schema(responses=TokenRowSerializer(many=True)),
    create=extend_schema(request=TokenCreateSerializer, responses={201: TokenMadeSerializer}),
    destroy=extend_schema(responses={204: OpenApiResponse(description="revoked")}))
class TokenViewSet(TenantScopedViewSet):
    """Your API tokens (Authorization: Token ...; also the Kafka SASL/PLAIN password). Rows of
    the signed-in user only, whatever their tenants: the service reads no one else's."""

    lookup_value_converter = "str"
    # For the schema only: the rows come from the service (tokens_of: the actor's own).
    queryset = AuthToken.objects.none()

    def list(self, request: Request) -> Response:
        rows = tokens_of(actor=request.user)
        return Response(TokenRowSerializer([asdict(row) for row in rows], many=True).data)

    def create(self, request: Request) -> Response:
        form = TokenCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        on = data.get("expires_on")
        expiry = expiry_from(data["expires"], on.isoformat() if on else "")
        token, secret = token_create(actor=request.user, name=data["name"],
                                     scope=data["scope"], expiry=expiry)
        row = next(r for r in tokens_of(actor=request.user) if r.id == token.digest[:16])
        made = TokenMadeSerializer({**asdict(row), "token": secret}).data
        return Response(made, status=status.HTTP_201_CREATED,
                        headers={"Cache-Control": "no-store"})

    def destroy(self, request: Request, pk: str) -> Response:
        token_revoke(actor=request.user, token_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
