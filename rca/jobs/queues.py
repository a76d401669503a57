"""The Celery queues' names, apart from the app (`celery_app`): `rca worker` names its consumers'
queues before it may import metrics (rca/cli/multiprocess.py), and this imports nothing."""

INVESTIGATIONS_QUEUE, SLACK_QUEUE = "investigations", "slack"
