from django.contrib.auth.models import AbstractUser
from django.db import models


class Member(AbstractUser):
    """The host's own user model, on a table of its own name."""

    team = models.CharField(max_length=40, blank=True)

    class Meta:
        db_table = "host_member"
