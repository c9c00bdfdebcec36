"""The RecommendDLJob controller: predicts a job's demand, admits all its workers or none
(a gang reservation in the extender's ledger) and runs them as pods. See controller/README.md.
"""
