"""What the library shows of its rows: near-duplicates merged into one experience, read as hits.

    dedup           near-duplicate clusters of vectors (exact below a size, LSH above)
    merge           `MergedView`: the clusters per domain, and the rule that picks a representative
    merged_hits     `MergedHits`: a cluster as one `Hit`, and a search's walk down the ranked rows
    decoded         ê a round decoded, kept for the merge until it has clustered them
    saved_clusters  the clusters kept in the file, shown on open; the view an opened file shows
    scoped          a search in the asker's environment; outcomes per environment
    search          a search by vector, end to end: tags, first stage, environment, second stage
    reference       the trusted rows a round of received batches is judged beside

Reads the index and the store; the façade (`dsonet.library.Library`) sits above it.
"""
