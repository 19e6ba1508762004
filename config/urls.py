from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from agents.observability.views import metrics
from api.v1 import api as api_v1
from dashboard.auth import LoginView

urlpatterns = [
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api_v1.urls),  # the REST API (api/)
    path("account/tokens/", include("api.urls")),  # a person's API tokens
    path("integrations/", include("integrations.urls")),  # webhooks (admins)
    path("api/", include("api.inbound_urls")),
    path("metrics", metrics, name="metrics"),  # Prometheus (agents/observability)
    path("", include("dashboard.urls")),
]

# A database that is away is a 503 with a page that says so (config/errors.py).
handler500 = "config.errors.server_error"
