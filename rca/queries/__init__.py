"""Questions asked of the stored incidents, one way for every caller: the API (`rca.api`) and the
pages (`rca.pages`) both search through `incidents.search`. A request that cannot be answered is a
`QueryError` naming the parameter at fault: the API answers it as a 422, a page shows its words."""
