"""The jobs the service runs, each with one body: the investigation runner (`runner`: claim under a
lease, run the pipeline, save, retry or close it as failed, hand the result to Slack), deliver to
Slack, sweep for stranded investigations. Two runners only schedule them: Celery when a broker is
configured (`celery_app`, with the scheduler `beat` sweeping), threads of the API process
otherwise (`inline`); `dispatch` picks one. Retries follow one policy (`policy.JOB_RETRIES`) in
both."""
