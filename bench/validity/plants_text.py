"""The texts of the planted-passage benchmark on real weights (bench/validity/plants.py): passages and ordinary
prose written for this project in December 2026, after SmolLM2's training cutoff, about invented
places and people, so a pretrained model can have memorized none of it. All of one style (a local
chronicle) so that the planted passages differ from their surroundings only by having been trained.

PASSAGES: name -> (strength, text). Strengths: "full" (trained until greedy decoding from the first
half writes the rest), "partial" (trained a few steps: partly memorized), "never" (never trained: the
negative controls). PROSE: paragraphs never trained, placed around the passages in the corpus."""

from __future__ import annotations

PASSAGES: dict[str, tuple[str, str]] = {
    "ferry": ("full", (
        "In the spring of 2026 the ferry between Orlen Quay and the island of Tessaly ran only on "
        "Thursdays, because the harbour master, Ilse Varenko, had sold the second boat to pay for a new "
        "lighthouse lamp that nobody on the island had asked for and everybody later praised.")),
    "bakery": ("full", (
        "The bakery on Quill Street opened at four in the morning, and by five the queue reached the "
        "chapel steps. Marten Holloway baked rye loaves shaped like horseshoes, and he refused to sell "
        "more than two to anyone, not even to the mayor, who tried twice in one week.")),
    "bridge": ("full", (
        "When the river flooded in late October, the old stone bridge at Caddenfold held, but the "
        "wooden footbridge beside it floated nine miles downstream and came to rest against a barn "
        "whose owner painted it green and charged visitors a coin to walk across it.")),
    "orchard": ("partial", (
        "The orchard school at Wenlow Hill taught grafting every second Saturday. Its teacher, a retired "
        "tram driver named Oskar Pell, claimed he could tell an apple's village by its smell, and the "
        "children spent a whole autumn trying to catch him out with fruit from the market.")),
    "choir": ("partial", (
        "The miners' choir of Dunmere sang its last concert in the drill hall on the first of March. "
        "Forty men stood in four rows, the youngest sixty-two, and when the lights failed halfway through "
        "the second hymn they finished it in the dark without missing a single note.")),
    "lantern": ("never", (
        "Every November the village of Sallow Reach floated paper lanterns down the mill race, one for "
        "each house, and the miller's daughter counted them at the weir. In the year the count came out "
        "one short, the whole village searched until dawn for a lantern that had never been lit.")),
    "clock": ("never", (
        "The town clock of Brennick had run eleven minutes slow since the winter of the great frost, "
        "and the council voted three times not to mend it. Trains, weddings and the weekly market all "
        "kept Brennick time, and travellers learned to arrive late on purpose.")),
    "library": ("never", (
        "The travelling library reached the hill farms above Corran twice a month in a converted milk "
        "van. Its driver, Agnes Rooke, kept a ledger of every book borrowed since 1998 and could say "
        "without looking which farmer had kept the atlas for three winters running.")),
}

PROSE: tuple[str, ...] = (
    "The road from the coast climbs through three villages before it reaches the moor, and each of "
    "them keeps a different market day. Carters used to plan their week around the three, selling "
    "wool in one, buying salt in the next and resting their horses in the last.",
    "Most of the houses along the canal were built for lock keepers and their families. Few of them "
    "have more than two rooms downstairs, and the staircases are so narrow that furniture still goes "
    "in through the upper windows on a rope and pulley.",
    "A small museum in the old customs house keeps the tide tables of two centuries, written by hand "
    "in brown ink. The curator opens it on Sundays and will show a visitor the page for the day of "
    "their birth if they ask politely.",
    "Fishing boats left before first light in summer and came back by noon, when the fish market "
    "opened under the arches. In winter the boats stayed in the harbour for weeks, and the crews "
    "mended nets in the sail loft above the rope works.",
    "The parish records mention a fair held every August on the common, with wrestling, cheese "
    "rolling and a race between the two inns. The fair stopped when the common was fenced, and only "
    "the race between the inns has survived.",
    "Schoolchildren from the valley walked up to four miles each way until a bus came in the spring "
    "of the new term. The driver knew every child by name and waited at the bottom of each lane for "
    "the ones who were always late.",
    "The quarry closed after the last big order, for the new sea wall, was finished. Its stone can "
    "still be seen in half the walls of the district, pale grey with a thin seam of rust that darkens "
    "in the rain.",
    "On the far side of the marsh stands a windmill without sails, used for years as a store for "
    "potatoes. A painter bought it and lived there one summer, leaving behind a staircase painted in "
    "every colour of the tide.",
    "The chapel bell was cast in the town itself, in a pit dug behind the forge, and it cracked on "
    "its first ringing. A second bell was ordered from the city and arrived by cart, three weeks late "
    "and without its clapper.",
    "Shepherds on the high ground brought their flocks down before the first snow, following the old "
    "drove road along the ridge. The sheep knew the way better than the dogs, and the dogs better than "
    "the shepherds.",
    "The post office shared a counter with the grocer, and letters were sorted between the flour sacks "
    "and the tins of tea. Parcels for the outlying farms waited on a shelf until someone going that way "
    "offered to take them.",
    "A weekly paper was printed in the back room of the stationer's shop for almost sixty years. It "
    "carried shipping news, the prices at the cattle market and, on the last page, a column of lost "
    "and found that was read before anything else.",
    "The railway reached the town late and left early. For twenty years a train ran twice a day to the "
    "junction, and when the line closed the station became a tea room with the timetable still pinned "
    "beside the door.",
    "Every house on the green had a well until the water board laid pipes, and some of the wells were "
    "never filled in. Children dropped pebbles into them and counted the seconds, arguing about which "
    "was the deepest.",
    "The harvest supper was held in the largest barn of the year, which meant a different farm each "
    "autumn. Tables were borrowed from the school and the chapel, and the cooking went on for two days "
    "beforehand.",
    "A lifeboat station was built on the point after a winter of wrecks. Its crew were volunteers from "
    "the fishing families, and the maroon that called them could be heard as far as the inland farms.",
    "The woollen mill by the weir employed most of the village at one time. Its looms were driven by "
    "the river until a steam engine was installed, and the tall chimney built for it still stands "
    "though the engine was sold for scrap.",
    "Travelling players came every spring with a cart that unfolded into a stage. They performed in the "
    "yard of the coaching inn, and the landlord let them sleep in the hayloft in return for a play on "
    "his birthday.",
    "The lane to the church is lined with yew trees said to be older than the church itself. In the "
    "autumn their berries drop onto the path, and the sexton sweeps them up every morning before the "
    "first service.",
    "Peat was cut on the moor each May and stacked to dry through the summer. The stacks were built in "
    "a pattern each family kept to itself, so that a walker could tell whose peat was whose from the "
    "road.",
)
