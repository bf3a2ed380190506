"""Natural-language submission: a sentence -> a TrainTask, the rules, the models a request names."""
