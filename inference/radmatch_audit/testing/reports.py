"""Sentences of synthetic chest X-ray reports, for benchmarks and tests of the judge path.

Authored for plumbing only: they exercise extraction, matching and grading with the toy
judge and carry no clinical meaning.
"""

SENTENCES = [
    "Small left pleural effusion.", "No pneumothorax.", "Heart size is normal.",
    "Mild bibasilar atelectasis.", "A 9 mm nodule in the right upper lobe.",
    "Endotracheal tube tip 4 cm above the carina.", "No focal consolidation.",
    "Moderate cardiomegaly.", "Degenerative changes of the thoracic spine.",
    "Right internal jugular catheter terminates in the superior vena cava.",
    "Patchy opacity in the left lower lobe, possibly pneumonia.", "Lungs are clear.",
    "Mild pulmonary vascular congestion.", "Large right pleural effusion.",
    "Small apical pneumothorax on the right.", "Nasogastric tube courses below the diaphragm.",
    "Calcified granuloma in the left mid lung.", "Hilar contours are unremarkable.",
    "Interval increase in interstitial markings.", "A 2.5 cm mass in the left hilum.",
    "Healed fracture of the right seventh rib.", "Elevated right hemidiaphragm.",
    "Aortic knob calcification.", "No acute osseous abnormality.",
    "Sternotomy wires are intact.", "Blunting of the left costophrenic angle.",
    "Mediastinal contours are within normal limits.", "Subsegmental atelectasis at the right base.",
    "Pacemaker leads in the right atrium and right ventricle.", "Hyperinflated lungs.",
    "Perihilar haziness suggesting mild edema.", "Trace bilateral pleural effusions.",
]
INDICATIONS = ["Shortness of breath.", "Cough and fever.", "Line placement.", "Chest pain.",
               "Follow-up of known nodule.", "Post-operative check."]
