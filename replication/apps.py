from django.apps import AppConfig


class ReplicationConfig(AppConfig):
    name = "replication"
    verbose_name = "Streams and replication"

    def ready(self) -> None:
        from replication.services.wakeups import connect_receivers

        connect_receivers()
        self._connect_grants()

    @staticmethod
    def _connect_grants() -> None:
        """ACE and identity changes clear the authorization cache (replication/grants.py);
        topic changes the produce path's topic lookups."""
        from django.contrib.auth import get_user_model
        from django.db.models.signals import m2m_changed, post_delete, post_save

        from accounts.models import Membership
        from replication.grants import forget
        from replication.models import Stream, Topic
        from replication.services.messages import forget_topics

        user = get_user_model()
        for model in (Stream, Membership, user):
            post_save.connect(forget, sender=model, dispatch_uid=f"grants-save-{model.__name__}")
            post_delete.connect(forget, sender=model,
                                dispatch_uid=f"grants-delete-{model.__name__}")
        m2m_changed.connect(forget, sender=user.groups.through, dispatch_uid="grants-groups")
        post_save.connect(forget_topics, sender=Topic, dispatch_uid="topics-save")
        post_delete.connect(forget_topics, sender=Topic, dispatch_uid="topics-delete")
