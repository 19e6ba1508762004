"""The desk's webhooks pages (admins): subscriptions, their delivery log,
and a re-send for a dead delivery."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from agents.errors import ServiceError
from dashboard.views.common import back, desk_view
from integrations import webhooks
from integrations.models import EVENT_TYPES, WebhookDelivery, WebhookSubscription

MANAGE = "integrations.manage_webhooks"


@require_http_methods(["GET", "POST"])
@never_cache
@desk_view(MANAGE)
def subscriptions(request: HttpRequest) -> HttpResponse:
    context: dict = {"event_types": list(EVENT_TYPES), "error": ""}
    status = 200
    if request.method == "POST":
        try:
            made = webhooks.subscription_create(
                url=request.POST.get("url", ""),
                event_types=request.POST.getlist("event_types"),
                description=request.POST.get("description", ""),
                user=request.user,
            )
            return back(request, reverse("integrations:subscription", args=[made.id]))
        except ServiceError as exc:
            context["error"], status = exc.message, exc.status
    context["subscriptions"] = list(WebhookSubscription.objects.all())
    return render(request, "integrations/webhooks.html", context, status=status)


@require_http_methods(["GET"])
@never_cache
@desk_view(MANAGE)
def subscription(request: HttpRequest, subscription_id: int) -> HttpResponse:
    sub = WebhookSubscription.objects.filter(pk=subscription_id).first()
    if sub is None:
        raise Http404("no such subscription")
    deliveries = webhooks.subscription_deliveries(subscription_id=sub.id)
    return render(request, "integrations/webhook.html", {"sub": sub, "deliveries": deliveries})


@require_POST
@desk_view(MANAGE)
def subscription_toggle(request: HttpRequest, subscription_id: int) -> HttpResponse:
    try:
        webhooks.subscription_set_active(
            subscription_id=subscription_id, active=request.POST.get("active") == "1"
        )
    except WebhookSubscription.DoesNotExist:
        raise Http404("no such subscription") from None
    return back(request, reverse("integrations:subscription", args=[subscription_id]))


@require_POST
@desk_view(MANAGE)
def delivery_resend(request: HttpRequest, delivery_id: int) -> HttpResponse:
    delivery = WebhookDelivery.objects.filter(pk=delivery_id).first()
    if delivery is None:
        raise Http404("no such delivery")
    target = reverse("integrations:subscription", args=[delivery.subscription_id])
    try:
        webhooks.delivery_resend(delivery_id=delivery_id)
    except ServiceError as exc:
        return render(
            request,
            "dashboard/refused.html",
            {"error": exc.message, "current": exc.current},
            status=exc.status,
        )
    return back(request, target)
