"""The jobs the service runs, each with one body: investigate (run the pipeline, close it as
failed when it cannot finish, hand the result to Slack), deliver to Slack, sweep for stranded
investigations. Two runners only schedule them: Celery when a broker is configured
(`celery_app`, with the scheduler `beat` sweeping), threads of the API process otherwise
(`inline`); `dispatch` picks one. A running investigation's claim is leased (`lease`), and retries
follow one policy (`policy`)."""
